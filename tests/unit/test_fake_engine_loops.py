"""The fakes' engine loops outlive a caller that stops waiting, as the engines' do.

A control call whose HTTP client goes away (or a resume that ends a wait pause's drain) cancels
the task waiting for the engine's answer; the answer then arrives for nobody. vLLM's client
drops it; a fake that raised instead lost its engine loop, and every later request on the
server waited forever (a whole CI run spent waiting behind one cancelled call).
"""

from __future__ import annotations

import asyncio

import pytest

from fakes.sglang.scheduler import FakeScheduler, WeightVersionChange
from fakes.vllm.engine import EngineCore, EngineCoreClient

pytestmark = pytest.mark.anyio


async def test_the_vllm_fakes_engine_core_answers_after_a_utility_call_whose_caller_left() -> None:
    core = EngineCore(step_s=0.002, vocab_size=100, max_num_seqs=8)
    client = EngineCoreClient(core)
    client.start()
    try:
        left = asyncio.ensure_future(client.call_utility_async("set_weight_version", "v1"))
        await asyncio.sleep(0)  # the call is queued, not yet answered
        left.cancel()
        version = await asyncio.wait_for(client.call_utility_async("get_weight_version"), 5)
    finally:
        await client.stop()
    assert version == "v1", "the call whose caller left still ran, in order, and the core went on"


async def test_the_sglang_fakes_scheduler_goes_on_after_a_version_change_whose_caller_left() -> None:
    scheduler = FakeScheduler(send=lambda out: None, step_s=0.002, deterministic=True)
    loop = asyncio.create_task(scheduler.run())
    try:
        left = WeightVersionChange("v1", asyncio.get_running_loop().create_future())
        left.done.cancel()
        scheduler.inbox.put_nowait(left)
        answered = WeightVersionChange("v2", asyncio.get_running_loop().create_future())
        scheduler.inbox.put_nowait(answered)
        await asyncio.wait_for(answered.done, 5)
        assert not loop.done() and scheduler.weight_version == "v2"
    finally:
        loop.cancel()
