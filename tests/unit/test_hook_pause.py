"""The pause hook through POST /pause."""

import pytest
from hook_app import assert_plugin_failure, deferring, plugin_with, raising, spy, stub_app

pytestmark = pytest.mark.anyio


async def test_a_plugin_answers_and_the_engine_is_not_called():
    spy_plugin, calls = spy()
    async with stub_app({"spy": spy_plugin, "answers": plugin_with("pause", lambda mode: {"is_paused": True, "mode": mode})}) as stub:
        assert await stub.ok("pause") == {"is_paused": True, "mode": "keep"}
        assert stub.control.pause_mode is None, "the engine was not paused"
    assert calls == []


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_plugin_defers_and_the_engine_pauses(is_async):
    seen = []
    async with stub_app({"defers": deferring("pause", is_async, seen)}) as stub:
        assert await stub.ok("pause") == {"is_paused": True, "mode": "keep"}
        assert seen == [stub.control] and stub.control.pause_mode == "keep"


async def test_a_plugin_decorates_the_engines_pause():
    async def pause(control, mode, timeout_s):
        # This server's requests are expensive to recompute: keep them, whatever was asked.
        state = await control.pause("keep", timeout_s)
        return {**state.model_dump(), "asked": mode}

    async with stub_app({"decorates": plugin_with("pause", pause)}) as stub:
        assert await stub.ok("pause", {"mode": "abort"}) == {"is_paused": True, "mode": "keep", "asked": "abort"}
        assert stub.control.pause_mode == "keep"


async def test_a_plugin_that_raises_is_a_500_naming_it(caplog):
    async with stub_app({"broken": raising("pause", RuntimeError("boom"))}) as stub:
        await assert_plugin_failure(stub, "pause", caplog)
