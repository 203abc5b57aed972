"""The loads hook through GET /v1/loads."""

import pytest
from hook_app import assert_plugin_failure, deferring, plugin_with, raising, spy, stub_app

pytestmark = pytest.mark.anyio

IDLE = {
    "loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0, "num_total_reqs": 0}],
    "aggregate": {"total_running_reqs": 0, "total_waiting_reqs": 0, "total_reqs": 0},
    "in_flight": 0,
    "paused": False,
    "weight_version": "default",
    "engine": "stub",
    "in_flight_by_version": {},
}


async def test_a_plugin_answers_and_the_engine_is_not_called():
    spy_plugin, calls = spy()
    answer = {**IDLE, "engine": "cached"}
    async with stub_app({"spy": spy_plugin, "answers": plugin_with("loads", lambda: answer)}) as stub:
        assert await stub.ok("loads") == answer
    assert calls == []


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_plugin_defers_and_the_engine_answers(is_async):
    seen = []
    async with stub_app({"defers": deferring("loads", is_async, seen)}) as stub:
        answer = await stub.ok("loads")
        # SGLang's top-level fields: when the answer was made, and the engine's version.
        assert answer.pop("version") == "engine-plugins-stub 0.1.0" and answer.pop("timestamp").endswith("+00:00")
        assert answer == IDLE
        assert seen == [stub.control]


async def test_a_plugin_decorates_the_engines_loads():
    async def loads(control):
        result = await control.loads()
        result.engine = f"{result.engine} (behind a proxy)"
        return result

    async with stub_app({"decorates": plugin_with("loads", loads)}) as stub:
        task = stub.generate(100_000)
        await stub.wait_in_flight(1)
        result = await stub.ok("loads")
        await stub.ok("abort")
        await task
    assert result["engine"] == "stub (behind a proxy)" and result["in_flight"] == 1


async def test_a_plugin_that_raises_is_a_500_naming_it(caplog):
    async with stub_app({"broken": raising("loads", RuntimeError("boom"))}) as stub:
        await assert_plugin_failure(stub, "loads", caplog)
