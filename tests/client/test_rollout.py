"""Partial rollouts over real stub servers: cancels survived, tokens, logprobs and per-token
versions accumulated, continuation after resume on the same server or another, bounded resubmits."""

import asyncio

import pytest

from engine_plugins.client import Rollout, ServerClient, run_rollout

from .conftest import KEY
from .helpers import wait_in_flight, wait_until

pytestmark = pytest.mark.anyio


async def test_a_rollout_survives_a_pause_and_continues_with_the_new_version(stub_fleet):
    async with ServerClient(stub_fleet[0].url, api_key=KEY) as server:
        old = (await server.loads()).weight_version
        rollouts = [Rollout([1, 2, 3], 600) for _ in range(3)]
        cancels = []
        tasks = [asyncio.create_task(run_rollout(r, [server], request_id=f"ro-{i}", on_attempt=lambda r, a: cancels.append(a)))
                 for i, r in enumerate(rollouts)]
        await wait_in_flight(server, 3)
        # Dispatched is not yet decoded: the stub's first token comes a step (4 ms) later, and a
        # loaded machine can pause them before it (a fresh-machine run once did). Give them 25 steps.
        await asyncio.sleep(0.1)
        await server.pause("abort")
        await wait_until("every rollout cancelled", lambda: _true(len(cancels) >= 3))
        salvaged = [len(r.output_ids) for r in rollouts]
        await server.update_weight_version("ro-v2")
        await server.resume()
        await asyncio.gather(*tasks)
    assert any(salvaged), "no rollout had a token when the pause cancelled it"
    for r, n in zip(rollouts, salvaged):
        assert r.finish_reason == "length" and len(r.output_ids) == 600 == len(r.output_logprobs) == len(r.token_versions)
        assert n < 600
        before = [{"version": old, "start": 0, "end": n}] if n else []
        assert r.version_spans() == [*before, {"version": "ro-v2", "start": n, "end": 600}]
        assert r.cancels == 1 and len(r.attempts) == 2 and r.attempts[1].request_id.endswith("-1")


async def _true(value: bool) -> bool:
    return value


async def test_a_rollout_moves_to_another_server_when_its_server_dies(tmp_path, stub_fleet):
    from .servers import stub_process

    with stub_process(tmp_path, "--step-s", "0.004", api_key=KEY) as doomed:
        async with ServerClient(doomed.url, api_key=KEY) as first, ServerClient(stub_fleet[1].url, api_key=KEY) as second:
            rollout = Rollout([5, 6, 7], 400)
            task = asyncio.create_task(run_rollout(rollout, [first, second], request_id="move"))
            await wait_in_flight(first, 1)
            await first.pause("keep")  # freeze it, so its partial tokens are fixed when it dies
            doomed.kill()
            await task
    assert rollout.finish_reason == "length" and len(rollout.output_ids) == 400
    assert [a.server for a in rollout.attempts] == [doomed.url, stub_fleet[1].url]
    assert rollout.attempts[0].error is not None and rollout.attempts[1].new_tokens == 400


async def test_a_rollout_continues_elsewhere_when_its_server_stays_paused(stub_fleet):
    async with ServerClient(stub_fleet[2].url, api_key=KEY) as paused, ServerClient(stub_fleet[1].url, api_key=KEY) as other:
        rollout = Rollout([1, 2], 300)
        task = asyncio.create_task(run_rollout(rollout, [paused, other], resume_timeout_s=0.5, request_id="stay"))
        await wait_in_flight(paused, 1)
        await paused.pause("abort")
        try:
            await task
        finally:
            await paused.resume()
    assert rollout.finish_reason == "length" and len(rollout.output_ids) == 300
    assert [a.server for a in rollout.attempts] == [paused.url, other.url] and rollout.attempts[0].cancelled


async def test_resubmits_are_bounded(stub_fleet):
    async with ServerClient(stub_fleet[2].url, api_key=KEY) as server:
        await server.pause("abort")
        try:
            rollout = await run_rollout(Rollout([1], 50), [server], max_resubmits=3, resume_timeout_s=0.05)
        finally:
            await server.resume()
    assert rollout.finish_reason == "abort" and "3 resubmits" in rollout.gave_up
    assert len(rollout.attempts) == 4 and all(a.cancelled and a.new_tokens == 0 for a in rollout.attempts)


async def test_a_resume_signal_replaces_polling(stub_fleet):
    async with ServerClient(stub_fleet[0].url, api_key=KEY) as server:
        signal = asyncio.Event()
        rollout = Rollout([1, 2, 3], 200)
        task = asyncio.create_task(run_rollout(rollout, [server], resume_signal=signal, request_id="sig"))
        await wait_in_flight(server, 1)
        await server.abort(["sig-0"])
        await wait_until("the cancel to be seen", lambda: _true(len(rollout.attempts) == 1))
        assert not task.done()
        signal.set()
        await task
    assert rollout.finish_reason == "length" and len(rollout.output_ids) == 200 and rollout.cancels == 1
