"""The metrics plugin on the engine's own /metrics, on the stub and both real engines.

The plugin is loaded from its entry point as a third party's would be, and writes to the
prometheus_client registry the engine already serves (SGLang's in multiprocess mode). The fakes
of the engines' internals do not run the engines' /metrics, so they are not targets here.
"""

import asyncio

import pytest
from .api import Api
from .metrics import moved, scrape, value

pytestmark = [pytest.mark.anyio, pytest.mark.targets("stub", "sglang", "vllm")]


async def test_an_abort_with_wait_moves_the_abort_salvage_and_wait_metrics(target):
    n = 4
    async with Api(target) as api:
        await api.warm(n)
        before = await scrape(api)
        tasks = api.start(n, target.long_tokens, prefix="metrics-abort")
        await api.wait_in_flight(n, running=True)
        result = await api.ok("POST", "/abort_requests", {"wait": True})
        results = await asyncio.gather(*tasks)
        after = await scrape(api)
    salvaged = sum(len(r["output_ids"]) for r in results)
    assert result["aborted"] == n and salvaged > 0
    assert moved(before, after, "engine_plugins_requests_aborted_total", route="/abort_requests", reason="request") == n
    assert moved(before, after, "engine_plugins_partial_generations_cancelled_total") == n
    assert moved(before, after, "engine_plugins_salvaged_tokens_total") == salvaged
    assert moved(before, after, "engine_plugins_abort_wait_seconds_count", reason="request") == 1
    assert value(after, "engine_plugins_requests_in_flight") == 0


async def test_a_version_bump_moves_the_version_metrics(target):
    async with Api(target) as api:
        before = await scrape(api)
        await api.ok("POST", "/update_weight_version", {"new_version": "metrics-v9"})
        after = await scrape(api)
    assert moved(before, after, "engine_plugins_weight_version_updates_total") == 1
    assert value(after, "engine_plugins_weight_version", version="metrics-v9") == 1


async def test_a_weight_swap_shows_open_with_its_lease_until_its_commit_counts_one_bump(target):
    async with Api(target) as api:
        before = await scrape(api)
        opened = await api.ok("POST", "/weight_swap/begin", {"version": "metrics-swap", "mode": "keep", "lease_s": 120})
        during = await scrape(api)
        await api.ok("POST", "/weight_swap/commit", {"swap_id": opened["swap_id"]})
        after = await scrape(api)
    assert value(before, "engine_plugins_weight_swap_open") == 0
    assert value(during, "engine_plugins_weight_swap_open") == 1
    assert value(during, "engine_plugins_weight_swap_lease_expires_timestamp_seconds") == pytest.approx(opened["lease_expires_at"])
    assert value(after, "engine_plugins_weight_swap_open") == 0
    assert value(after, "engine_plugins_weight_swap_lease_expires_timestamp_seconds") == 0
    assert moved(before, after, "engine_plugins_weight_version_updates_total") == 1, "the commit's bump, counted once"
    assert value(after, "engine_plugins_weight_version", version="metrics-swap") == 1
