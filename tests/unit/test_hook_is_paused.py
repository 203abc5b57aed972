"""The is_paused hook through GET /is_paused."""

import pytest
from hook_app import assert_plugin_failure, deferring, plugin_with, raising, spy, stub_app

pytestmark = pytest.mark.anyio


async def test_a_plugin_answers_and_the_engine_is_not_called():
    spy_plugin, calls = spy()
    async with stub_app({"spy": spy_plugin, "answers": plugin_with("is_paused", lambda: {"is_paused": True, "mode": "abort"})}) as stub:
        assert await stub.ok("is_paused") == {"is_paused": True, "mode": "abort"}
    assert calls == []


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_plugin_defers_and_the_engine_answers(is_async):
    seen = []
    async with stub_app({"defers": deferring("is_paused", is_async, seen)}) as stub:
        assert await stub.ok("is_paused") == {"is_paused": False, "mode": None}
        assert seen == [stub.control]


async def test_a_plugin_decorates_the_engines_answer():
    def is_paused(control):
        state = control.is_paused()
        return {**state.model_dump(), "in_flight": len(control.registry)}

    async with stub_app({"decorates": plugin_with("is_paused", is_paused)}) as stub:
        await stub.ok("pause")
        assert await stub.ok("is_paused") == {"is_paused": True, "mode": "keep", "in_flight": 0}


async def test_a_plugin_that_raises_is_a_500_naming_it(caplog):
    async with stub_app({"broken": raising("is_paused", RuntimeError("boom"))}) as stub:
        await assert_plugin_failure(stub, "is_paused", caplog)
