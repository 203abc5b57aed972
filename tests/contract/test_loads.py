"""GET /v1/loads: SGLang's shape on every engine, and truthful totals."""

import pytest

from .api import Api, total_reqs

pytestmark = pytest.mark.anyio


async def test_loads_has_sglang_shape_and_reads_zero_when_idle(target):
    async with Api(target) as api:
        loads = await api.loads()
    assert {"loads", "aggregate", "in_flight", "paused", "weight_version", "engine"} <= set(loads)
    assert loads["loads"], "at least one rank"
    for rank in loads["loads"]:
        assert {"dp_rank", "num_running_reqs", "num_waiting_reqs", "num_total_reqs"} <= set(rank)
        assert rank["num_total_reqs"] == rank["num_running_reqs"] + rank["num_waiting_reqs"]
    agg = loads["aggregate"]
    assert agg["total_reqs"] == total_reqs(loads) == agg["total_running_reqs"] + agg["total_waiting_reqs"]
    assert loads["in_flight"] == 0 and total_reqs(loads) == 0
    assert loads["paused"] is False
    assert isinstance(loads["weight_version"], str) and loads["engine"] in target.name


async def test_loads_count_every_request_in_flight(target):
    async with Api(target) as api:
        await api.warm(6)
        tasks = api.start(6, target.long_tokens, prefix="loads")
        loads = await api.wait_in_flight(6)
        assert total_reqs(loads) == loads["in_flight"] == 6
        result = await api.ok("POST", "/abort_requests", {"wait": True})
        assert result["idle"] is True
        for task in tasks:
            await task
        assert total_reqs(await api.loads()) == 0
