"""The client against the contract targets, real engines included: a fleet abort-until-idle, and
partial rollouts continuing across a pause and a weight-version bump."""

import asyncio

import pytest

from engine_plugins.client import Fleet, Rollout, ServerClient, run_rollout

from .helpers import wait_in_flight, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.targets("stub", "vllm-stub", "sglang-stub", "sglang", "vllm")]


async def test_fleet_abort_until_idle_on_a_real_server_beside_a_dead_one(target, unreachable_url):
    n = 8
    async with Fleet([target.url, unreachable_url], api_key=target.api_key) as fleet:
        server = fleet.servers[0]
        await asyncio.gather(*(server.loads() for _ in range(n)))  # open connections before the burst
        gens = [asyncio.create_task(server.partial_generate([1, 15, 27, 33, 41], {"max_new_tokens": target.long_tokens, "ignore_eos": True},
                                                            f"client-real-{i}")) for i in range(n)]
        await wait_in_flight(server, n, gens, running=False)
        result = await fleet.abort_until_idle(timeout_s=120)
        partials = await asyncio.gather(*gens)
        load = await server.loads()
    real, dead = result.results
    assert real.ok and real.value.idle and real.value.aborted == n and real.value.in_flight == 0, target.log_tail()
    assert dead.kind == "unreachable"
    assert load.idle and load.total == 0
    for p in partials:
        assert p.cancelled and len(p.output_ids) == len(p.output_logprobs) < target.long_tokens


async def test_rollouts_continue_from_their_tokens_across_a_version_bump(target):
    n, max_new = 4, target.long_tokens
    async with ServerClient(target.url, api_key=target.api_key) as server:
        old = (await server.loads()).weight_version
        new = f"{old}-client-next"
        rollouts = [Rollout([1, 15, 27, 33, 41 + i], max_new) for i in range(n)]
        seen = []
        tasks = [asyncio.create_task(run_rollout(r, [server], {"ignore_eos": True}, request_id=f"client-ro-{i}",
                                                 on_attempt=lambda r, a: seen.append(a)))
                 for i, r in enumerate(rollouts)]
        try:
            await wait_in_flight(server, n, tasks, running=True)
            # A short generation that runs to its end steps the running batch with it: every
            # rollout then has tokens for the pause to salvage.
            await server.partial_generate([1, 2, 3], {"max_new_tokens": 2, "ignore_eos": True})
            await server.pause("abort")
            await wait_until("every rollout's partial back", lambda: _at_least(seen, n), deadline_s=120)
            salvaged = [len(r.output_ids) for r in rollouts]
            await server.update_weight_version(new)
            await server.resume()
            await asyncio.wait_for(asyncio.gather(*tasks), 300)
        finally:
            await server.resume()
    assert sum(salvaged) > 0
    for r, k in zip(rollouts, salvaged):
        assert r.finish_reason == "length" and len(r.output_ids) == max_new == len(r.output_logprobs), r.to_dict()
        assert r.token_versions == [old] * k + [new] * (max_new - k), r.version_spans()
        assert r.cancels == 1


async def _at_least(items, n) -> bool:
    return len(items) >= n
