"""The resume hook through POST /resume."""

import pytest
from hook_app import assert_plugin_failure, deferring, plugin_with, raising, spy, stub_app

pytestmark = pytest.mark.anyio


async def test_a_plugin_answers_and_the_engine_is_not_called():
    spy_plugin, calls = spy()
    async with stub_app({"spy": spy_plugin, "answers": plugin_with("resume", lambda: {"is_paused": True, "mode": "keep"})}) as stub:
        await stub.ok("pause")
        assert await stub.ok("resume") == {"is_paused": True, "mode": "keep"}
        assert stub.control.pause_mode == "keep", "the engine was not resumed"
    assert calls == ["pause"]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_plugin_defers_and_the_engine_resumes(is_async):
    seen = []
    async with stub_app({"defers": deferring("resume", is_async, seen)}) as stub:
        await stub.ok("pause")
        assert await stub.ok("resume") == {"is_paused": False, "mode": None}
        assert seen == [stub.control]


async def test_a_plugin_decorates_the_engines_resume():
    async def resume(control):
        was = control.is_paused().mode
        state = await control.resume()
        return {**state.model_dump(), "was": was}

    async with stub_app({"decorates": plugin_with("resume", resume)}) as stub:
        await stub.ok("pause")
        assert await stub.ok("resume") == {"is_paused": False, "mode": None, "was": "keep"}


async def test_a_plugin_that_raises_is_a_500_naming_it(caplog):
    async with stub_app({"broken": raising("resume", RuntimeError("boom"))}) as stub:
        await assert_plugin_failure(stub, "resume", caplog)
