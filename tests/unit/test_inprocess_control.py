"""EngineControl, the contract's operations as Python calls, on a stub engine held in this process:
the same answers and errors as the routes (the same operations behind both), and the same hooks."""

import asyncio
import json

import pytest

from engine_plugins import ContractError, hookimpl
from engine_plugins.engines.stub.engine import StubEngine
from engine_plugins.inprocess import EngineControl, attach

HEADERS = {"X-Engine-Plugins-Contract": "1", "Content-Type": "application/json"}

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def _route(control: EngineControl, method: str, path: str, body=None):
    status, _, raw = await control.http(method, path, None if body is None else json.dumps(body).encode(), None, HEADERS)
    return status, json.loads(raw)


async def test_attach_gives_one_control_per_engine():
    engine = StubEngine()
    assert attach(engine) is attach(engine)
    assert attach(StubEngine()) is not attach(engine)


async def test_attach_refuses_an_object_no_adapter_takes():
    with pytest.raises(TypeError, match="AsyncLLM or SGLang's Engine"):
        attach(object())


@pytest.mark.parametrize("call, route", [
    (lambda c: c.abort(request_ids=[""] * 0, timeout_s=-1), ("POST", "/abort_requests", {"timeout_s": -1, "wait": True})),
    (lambda c: c.abort(request_ids=["a"], max_staleness=2), ("POST", "/abort_requests", {"request_ids": ["a"], "max_staleness": 2, "wait": True})),
    (lambda c: c.pause("sideways"), ("POST", "/pause", {"mode": "sideways"})),
    (lambda c: c.partial_generate([1, 2], {"max_new_tokens": 0}), ("POST", "/partial_generate",
                                                                  {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 0}})),
    (lambda c: c.partial_generate([10**6], {"max_new_tokens": 4}), ("POST", "/partial_generate",
                                                                  {"input_ids": [10**6], "sampling_params": {"max_new_tokens": 4}})),
    (lambda c: c.update_weight_version(""), ("POST", "/update_weight_version", {"new_version": ""})),
    (lambda c: c.commit_weight_swap(), ("POST", "/weight_swap/commit", {})),
])
async def test_a_bad_argument_is_the_routes_error(call, route):
    control = attach(StubEngine())
    with pytest.raises(ContractError) as raised:
        await call(control)
    status, body = await _route(control, *route)
    assert (raised.value.status, raised.value.message) == (status, body["error"]["message"])
    assert 400 <= status < 500
    assert (await control.loads()).in_flight == 0


async def test_the_operations_answer_as_the_routes_do():
    control = attach(StubEngine(step_s=0.01))
    gen = asyncio.ensure_future(control.partial_generate([1, 2, 3], {"max_new_tokens": 10_000}, request_id="r1"))
    while (await control.loads()).in_flight < 1:
        await asyncio.sleep(0.01)
    status, loads = await _route(control, "GET", "/v1/loads")
    assert status == 200 and loads["in_flight"] == 1 == (await control.loads()).in_flight
    bump = await control.update_weight_version("v2")
    assert (bump.previous_version, bump.new_version, bump.aborted) == ("default", "v2", 0)
    await asyncio.sleep(0.2)  # some tokens under v2 (a step is 10 ms)
    paused = await control.pause("abort")
    out = await gen
    assert paused.is_paused and paused.mode == "abort" and out.cancelled and out.cancel_reason == "pause"
    assert [s.version for s in out.weight_versions] == ["default", "v2"]
    assert len(out.output_ids) == len(out.output_logprobs) > 0
    assert (await control.is_paused()).model_dump() == (await _route(control, "GET", "/is_paused"))[1]
    assert not (await control.resume()).is_paused
    result = await control.abort()
    assert (result.aborted, result.in_flight, result.idle) == (0, 0, True)


async def test_a_weight_swap_block_commits_on_leaving_and_stays_open_when_it_raises():
    control = attach(StubEngine())
    async with control.weight_swap("v2") as began:
        assert began.state == "open" and (await control.is_paused()).weight_swap.version == "v2"
    assert control.weight_version() == "v2" and not (await control.is_paused()).is_paused
    with pytest.raises(RuntimeError):
        async with control.weight_swap("v3"):
            raise RuntimeError("the load failed")
    state = await control.is_paused()
    assert state.is_paused and state.weight_swap.version == "v3" and control.weight_version() == "v2"
    with pytest.raises(ContractError) as second:
        await control.begin_weight_swap("v4")
    assert second.value.status == 409


async def test_a_plugin_sees_in_process_calls_with_no_http_request():
    seen = []

    class Watcher:
        @hookimpl
        def update_weight_version(self, new_version, http_request):
            seen.append((new_version, http_request))

    control = attach(StubEngine())
    control.stack.pm.register(Watcher())
    await control.update_weight_version("v2")
    await _route(control, "POST", "/update_weight_version", {"new_version": "v3"})
    assert [v for v, _ in seen] == ["v2", "v3"]
    assert seen[0][1] is None and seen[1][1] is not None
