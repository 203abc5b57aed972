"""The metrics plugin on the stub engine's /metrics, scraped while contract operations run
(stale aborts included: reason ``stale``, by the route that led to them).

The stub serves prometheus_client's default registry on /metrics as both engines do; the plugin
is loaded from its entry point, as on an engine.
"""

import asyncio

import httpx
import pytest
from contract.api import Api
from contract.metrics import moved, scrape, value
from targets import stub_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    with stub_server(tmp_path_factory.mktemp("metrics"), "--step-s", "0.002") as target:
        yield target


async def test_an_abort_with_wait_counts_requests_tokens_and_the_wait(stub):
    async with Api(stub) as api:
        before = await scrape(api)
        tasks = api.start(3, 100_000, prefix="metrics-abort")
        await api.wait_in_flight(3, running=True)
        during = await scrape(api)
        assert value(during, "engine_plugins_requests_in_flight") == 3
        assert value(during, "engine_plugins_requests_held") == 0
        await api.ok("POST", "/abort_requests", {"wait": True})
        results = await asyncio.gather(*tasks)
        after = await scrape(api)

    assert moved(before, after, "engine_plugins_requests_aborted_total", route="/abort_requests", reason="request") == 3
    assert moved(before, after, "engine_plugins_abort_wait_seconds_count", reason="request") == 1
    assert moved(before, after, "engine_plugins_abort_wait_seconds_sum", reason="request") > 0
    assert moved(before, after, "engine_plugins_partial_generations_cancelled_total") == 3
    salvaged = sum(len(r["output_ids"]) for r in results)
    assert salvaged > 0 and moved(before, after, "engine_plugins_salvaged_tokens_total") == salvaged
    assert value(after, "engine_plugins_requests_in_flight") == 0


async def test_a_version_bump_shows_the_new_version_and_counts_the_aborts_it_made(stub):
    async with Api(stub) as api:
        before = await scrape(api)
        previous = (await api.loads())["weight_version"]
        tasks = api.start(2, 100_000, prefix="metrics-bump")
        await api.wait_in_flight(2)
        await api.ok("POST", "/update_weight_version", {"new_version": "metrics-v2", "abort_all_requests": True})
        await asyncio.gather(*tasks)
        after = await scrape(api)
    assert value(after, "engine_plugins_weight_version", version="metrics-v2") == 1
    assert ("engine_plugins_weight_version", frozenset({("version", previous)})) not in after
    assert value(after, "engine_plugins_weight_version_updates_total") - value(before, "engine_plugins_weight_version_updates_total") == 1
    aborted = ("engine_plugins_requests_aborted_total", dict(route="/update_weight_version", reason="weight_version"))
    assert value(after, aborted[0], **aborted[1]) - value(before, aborted[0], **aborted[1]) == 2


async def test_a_pause_in_abort_mode_counts_its_aborts_and_refused_generations(stub):
    async with Api(stub) as api:
        before = await scrape(api)
        tasks = api.start(2, 100_000, prefix="metrics-pause")
        await api.wait_in_flight(2)
        await api.ok("POST", "/pause", {"mode": "abort"})
        refused = await api.generate(10)
        await api.ok("POST", "/resume")
        await asyncio.gather(*tasks)
        after = await scrape(api)
    assert refused["cancelled"] is True and refused["output_ids"] == []
    labels = dict(route="/pause", reason="pause")
    assert value(after, "engine_plugins_requests_aborted_total", **labels) - value(before, "engine_plugins_requests_aborted_total", **labels) == 2
    assert value(after, "engine_plugins_abort_wait_seconds_count", reason="pause") - value(before, "engine_plugins_abort_wait_seconds_count", reason="pause") == 1
    cancelled = "engine_plugins_partial_generations_cancelled_total"
    assert value(after, cancelled) - value(before, cancelled) == 3


async def test_requests_held_before_the_scheduler_are_counted(tmp_path):
    with stub_server(tmp_path, "--tokenize-s", "30") as target:
        async with Api(target) as api:
            tasks = api.start(2, 100, prefix="metrics-held")
            await api.wait_in_flight(2)
            during = await scrape(api)
            await api.ok("POST", "/abort_requests", {"wait": True})
            await asyncio.gather(*tasks)
    assert value(during, "engine_plugins_requests_held") == 2
    assert value(during, "engine_plugins_requests_in_flight") == 2


async def test_the_allowlist_without_metrics_switches_the_plugin_off(tmp_path):
    with stub_server(tmp_path, env={"ENGINE_PLUGINS_PLUGINS": "someone_else"}) as target:
        async with Api(target) as api:
            await api.ok("POST", "/abort_requests", {"wait": True})
            await api.ok("POST", "/update_weight_version", {"new_version": "v2"})
            assert await scrape(api) == {}
            async with httpx.AsyncClient(base_url=target.url) as http:
                assert "python_gc_objects_collected_total" in (await http.get("/metrics")).text, "/metrics is still served"


async def test_stale_aborts_are_counted_with_reason_stale_by_route(stub):
    async with Api(stub) as api:
        before = await scrape(api)
        old = api.start(2, 100_000, prefix="metrics-old")
        fenced = asyncio.create_task(api.ok("POST", "/partial_generate", {
            "input_ids": [1, 2], "sampling_params": {"max_new_tokens": 100_000}, "request_id": "metrics-fenced", "max_staleness": 1,
        }))
        await api.wait_in_flight(3, running=True)
        await api.ok("POST", "/update_weight_version", {"new_version": "metrics-stale-v1"})
        assert (await fenced)["cancel_reason"] == "stale"
        await api.ok("POST", "/abort_requests", {"admitted_before": "metrics-stale-v1", "wait": True})
        await asyncio.gather(*old)
        after = await scrape(api)
    assert moved(before, after, "engine_plugins_requests_aborted_total", route="/update_weight_version", reason="stale") == 1
    assert moved(before, after, "engine_plugins_requests_aborted_total", route="/abort_requests", reason="stale") == 2
    assert moved(before, after, "engine_plugins_requests_aborted_total", route="/abort_requests", reason="request") == 0
