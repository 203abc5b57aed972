"""The metrics plugin counts stale aborts: reason ``stale`` on the aborted counter, by the route
that led to them (a client's abort by age, or the bump that fenced partial generations)."""

import asyncio

import pytest
from contract.api import Api
from contract.metrics import moved, scrape
from targets import stub_server

pytestmark = pytest.mark.anyio

ABORTED = "engine_plugins_requests_aborted_total"


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    with stub_server(tmp_path_factory.mktemp("stale-metrics"), "--step-s", "0.002") as target:
        yield target


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
    assert moved(before, after, ABORTED, route="/update_weight_version", reason="stale") == 1
    assert moved(before, after, ABORTED, route="/abort_requests", reason="stale") == 2
    assert moved(before, after, ABORTED, route="/abort_requests", reason="request") == 0
