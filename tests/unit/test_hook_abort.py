"""The abort hook through POST /abort_requests, and the aborts the control makes itself."""

import asyncio

import pytest
from hook_app import assert_plugin_failure, deferring, plugin_with, raising, spy, stub_app

from engine_plugins.core.control import RolloutControl
from engine_plugins.contract.errors import ContractError
from engine_plugins.contract.schema import AbortResult, SamplingParams
from engine_plugins.engines.stub.engine import StubEngine

pytestmark = pytest.mark.anyio


async def test_a_plugin_answers_and_the_engine_is_not_called():
    spy_plugin, calls = spy()

    def abort():
        return AbortResult(aborted=7, in_flight=0, idle=True)

    async with stub_app({"spy": spy_plugin, "answers": plugin_with("abort", abort)}) as stub:
        task = stub.generate(30)
        await stub.wait_in_flight(1)
        assert (await stub.ok("abort"))["aborted"] == 7
        assert "abort" not in calls
        assert (await task).json()["finish_reason"] == "length", "the request was not aborted"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_plugin_defers_and_the_engine_aborts(is_async):
    seen = []
    async with stub_app({"defers": deferring("abort", is_async, seen)}) as stub:
        task = stub.generate(100_000)
        await stub.wait_in_flight(1)
        result = await stub.ok("abort", {"wait": True})
        assert result == {"status": "aborted", "aborted": 1, "in_flight": 0, "idle": True, "timed_out": False}
        assert seen == [stub.control]
        assert (await task).json()["cancelled"] is True


async def test_a_plugin_decorates_the_engines_abort():
    async def abort(control, request_ids, wait, timeout_s):
        result = await control.abort(request_ids, wait, timeout_s)
        return {**result.model_dump(), "aborted_by": "decorator"}

    async with stub_app({"decorates": plugin_with("abort", abort)}) as stub:
        task = stub.generate(100_000, request_id="x")
        await stub.wait_in_flight(1)
        result = await stub.ok("abort", {"request_ids": ["x"], "wait": True})
        assert result["aborted"] == 1 and result["aborted_by"] == "decorator"
        assert (await task).json()["cancelled"] is True


async def test_a_plugin_that_raises_is_a_500_naming_it(caplog):
    async with stub_app({"broken": raising("abort", RuntimeError("boom"))}) as stub:
        await assert_plugin_failure(stub, "abort", caplog)


async def test_a_contract_error_keeps_its_status():
    refuse = raising("abort", ContractError(403, "aborts are off during evaluation", "forbidden"))
    async with stub_app({"refuses": refuse}) as stub:
        response = await stub.call("abort")
    assert response.status_code == 403
    assert response.json() == {"error": {"message": "aborts are off during evaluation", "type": "forbidden", "param": None, "code": 403}}


async def test_the_controls_own_aborts_go_through_the_hook_with_their_reason_and_request():
    seen = []

    def abort(reason, wait, request_ids, http_request):
        seen.append((reason, wait, request_ids, http_request.url.path))

    async with stub_app({"watches": plugin_with("abort", abort)}) as stub:
        task = stub.generate(100_000)
        await stub.wait_in_flight(1)
        await stub.ok("update_weight_version", {"new_version": "v2", "abort_all_requests": True})
        assert (await task).json()["cancelled"] is True
        task = stub.generate(100_000)
        await stub.wait_in_flight(1)
        await stub.ok("pause", {"mode": "abort"})
        assert (await task).json()["cancelled"] is True
        await stub.ok("resume")
        await stub.ok("abort")
    assert seen == [
        ("weight_version", True, None, "/update_weight_version"),
        ("pause", True, None, "/pause"),
        ("request", True, None, "/abort_requests"),  # no "wait": it settles
    ]


async def test_a_plugin_answering_a_controls_own_abort_is_used_by_the_control():
    def abort():
        return {"aborted": 3, "in_flight": 0, "idle": True}

    async with stub_app({"answers": plugin_with("abort", abort)}) as stub:
        bump = await stub.ok("update_weight_version", {"new_version": "v2", "abort_all_requests": True})
    assert bump["aborted"] == 3


async def test_a_control_without_a_plugin_stack_aborts_by_itself():
    control = RolloutControl(StubEngine(step_s=0.001))
    task = asyncio.ensure_future(control.partial_generate([1], SamplingParams(max_new_tokens=100_000), "r"))
    while not len(control.registry):
        await asyncio.sleep(0.001)
    assert (await control.pause("abort", 10)).mode == "abort"
    assert (await task).cancelled is True
