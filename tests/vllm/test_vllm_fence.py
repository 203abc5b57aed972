"""The fence on vLLM's seam, shown on the fake AsyncLLM where the race can be held open: a request
covered by an abort before the engine core knows it is aborted right after its add is sent."""

import asyncio

import pytest

from engine_plugins.core.control import RolloutControl
from engine_plugins.contract.schema import SamplingParams
from engine_plugins.engines.vllm import engine_core
from engine_plugins.engines.vllm.facade import VllmEngine
from engine_plugins.engines.vllm.seam import VllmSeam
from engine_plugins.engines.vllm.tracking import Tracker
from fakes.vllm import engine as fake
from fakes.vllm.server import fake_names

pytestmark = pytest.mark.anyio


async def _until(predicate, deadline_s=10.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not predicate():
        assert loop.time() < end, "condition never held"
        await asyncio.sleep(0.001)


@pytest.fixture
async def held_engine():
    """A fake AsyncLLM whose sends to the engine core wait for a gate, with the seam installed."""
    engine_core.install_request_counts(fake.EngineCore)
    llm = fake.AsyncLLM(step_s=0.002)
    llm.start()
    gate = asyncio.Event()
    send = llm.engine_core.add_request_async

    async def held_send(request):
        await gate.wait()
        await send(request)

    llm.engine_core.add_request_async = held_send
    tracker = Tracker(VllmEngine(fake_names(), llm))
    tracker.install()
    seam = VllmSeam(tracker)
    try:
        yield llm, seam, RolloutControl(seam, 10.0), gate
    finally:
        tracker.uninstall()
        await llm.shutdown()


async def test_contract_request_aborted_before_the_engine_core_has_it(held_engine):
    llm, seam, control, gate = held_engine
    task = asyncio.create_task(control.partial_generate([1, 5, 9], SamplingParams(max_new_tokens=1000, ignore_eos=True), "early"))
    await _until(lambda: llm.output_processor.request_states)  # in the front-end, not yet sent
    [entry] = seam.registry.select()
    assert entry.dispatched is False
    result = await control.abort(None, wait=False)
    assert result.aborted == 1
    gate.set()
    generation = await task
    assert generation.cancelled is True and generation.output_ids == []
    await _until(lambda: not llm.engine_core.core.scheduler.requests)  # the abort followed the add
    assert [(r["num_running_reqs"], r["num_waiting_reqs"]) for r in await seam.rank_loads()] == [(0, 0)]
    assert len(seam.registry) == 0


async def test_native_request_aborted_while_tokenizing(held_engine):
    llm, seam, control, gate = held_engine
    params = fake.SamplingParams(max_tokens=1000, ignore_eos=True)

    async def native():
        outputs = [out async for out in llm.generate("some prompt", params, "cmpl-x-0")]
        return outputs[-1]

    task = asyncio.create_task(native())
    await _until(lambda: len(seam.registry) == 1)
    result = await control.abort(["cmpl-x-0"], wait=False)
    assert result.aborted == 1
    gate.set()
    final = await task
    assert final.finished and final.outputs[0].finish_reason == "abort"
    await _until(lambda: not llm.engine_core.core.scheduler.requests)
    assert len(seam.registry) == 0


async def test_duplicate_native_ids_are_tracked_separately(held_engine):
    llm, seam, control, gate = held_engine
    gate.set()
    params = fake.SamplingParams(max_tokens=1000, ignore_eos=True)

    async def native():
        return [out async for out in llm.generate("p", params, "same-id")][-1]

    tasks = [asyncio.create_task(native()) for _ in range(2)]
    await _until(lambda: len(seam.registry) == 2 and all(e.dispatched for e in seam.registry.select()))
    result = await control.abort(["same-id"], wait=True)
    assert result.aborted == 2 and result.idle
    assert all(t.outputs[0].finish_reason == "abort" for t in await asyncio.gather(*tasks))
