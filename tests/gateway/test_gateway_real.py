"""The gateway tier on the real engines: smg 1.13.0 with ``--enable-rl`` in front of a real SGLang
0.5.23 and a real vLLM 0.32, both with the plugin. smg detects each engine, parses both
``/v1/loads``, and one fan-out each of abort with wait, loads, version bump, pause and resume
reaches both engines and has its effect on each; the client's Fleet drives both through it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contract.api import Api
from engine_plugins.client import Fleet
from targets import API_KEY

from .tier import Smg, check_discovery, check_fanouts, check_loads_accepted

pytestmark = [pytest.mark.anyio, pytest.mark.uses_targets("sglang", "vllm")]


async def test_smg_detects_sglang_and_vllm(real_gateway, real_pair):
    async with Smg(real_gateway) as smg:
        await check_discovery(smg, list(real_pair.items()))


async def test_smg_parses_both_engines_loads(real_gateway, real_pair):
    async with Smg(real_gateway) as smg:
        await check_loads_accepted(smg, list(real_pair.values()))


async def test_each_operation_fans_out_to_both_engines(real_gateway, real_pair):
    async with Smg(real_gateway) as smg:
        await check_fanouts(smg, list(real_pair.values()))


async def test_fleet_through_smg_drains_both_engines(real_gateway, real_pair):
    targets = list(real_pair.values())
    apis = [Api(t) for t in targets]
    gens = [asyncio.create_task(api.generate(t.long_tokens, request_id=f"smg-fleet-{i}-{j}"))
            for i, (api, t) in enumerate(zip(apis, targets)) for j in range(2)]
    try:
        for api in apis:
            await api.wait_in_flight(2)
        async with Fleet(gateway=real_gateway.url, api_key=API_KEY) as fleet:
            drained = await fleet.abort_until_idle(timeout_s=60)
            loads = await fleet.loads()
        partials = await asyncio.gather(*gens)
    finally:
        for api in apis:
            await api.__aexit__()
    assert drained.ok and sorted(r.url for r in drained.results) == sorted(t.url for t in targets), drained.to_dict()
    assert all(r.value.idle and r.value.aborted == 2 for r in drained.results), drained.to_dict()
    assert all(p["cancelled"] for p in partials)
    engines = {r.url: r.value.engine for r in loads.results}
    assert engines == {t.url: name for name, t in real_pair.items()} and all(r.value.idle for r in loads.results)


async def test_sglang_keeps_every_top_level_field_of_its_own_loads(real_pair):
    """SGLang 0.5.23's /v1/loads answers timestamp, version, accelerator, num_accelerators and
    loads (entrypoints/v1_loads.py): with the plugin each is still there, with SGLang's value."""
    async with Api(real_pair["sglang"]) as api:
        answer = await api.ok("GET", "/v1/loads", params={"include": "core,disagg,queues,memory"})
    assert answer["version"] == "0.5.23"
    # The CPU has no accelerator: SGLang's own helper says None; one rank's share of TP x PP is 1.
    assert answer["accelerator"] is None and answer["num_accelerators"] == 1, answer


async def test_fleet_weight_swap_through_smg_holds_both_engines_and_commits_one_version(real_gateway, real_pair):
    targets = list(real_pair.values())
    version = f"smg-swap-{uuid.uuid4().hex[:8]}"
    apis = [Api(t) for t in targets]
    gens = [asyncio.create_task(api.generate(t.finish_tokens, request_id=f"smg-swap-{i}")) for i, (api, t) in enumerate(zip(apis, targets))]
    try:
        for api in apis:
            await api.wait_in_flight(1, running=True)
        async with Fleet(gateway=real_gateway.url, api_key=API_KEY) as fleet:
            async with fleet.weight_swap(version, clear_cache=False) as swap:
                during = [await api.ok("GET", "/is_paused") for api in apis]
            loads = await fleet.loads()
        results = await asyncio.gather(*gens)
    finally:
        for api in apis:
            await api.__aexit__()
    assert swap.began.ok and swap.committed.ok, (swap.began.to_dict(), swap.committed.to_dict())
    assert all(state["is_paused"] and state["weight_swap"]["version"] == version for state in during)
    assert all(r.value.weight_version == version for r in loads.results), loads.to_dict()
    for result, target in zip(results, targets):
        assert result["finish_reason"] == "length" and len(result["output_ids"]) == target.finish_tokens
        assert result["weight_versions"][-1]["version"] == version, "kept across the swap"
