"""Every target's ``/v1/loads``, asked as smg asks (``include=core,disagg,queues,memory``), is a
strict superset of SGLang's shape that smg's typed parser accepts: the contract's fields, SGLang's
top-level ``timestamp`` and ``version`` as strings, every field smg types with its type (32-bit
ints, floats, no nulls), while requests are running."""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api
from engine_plugins.contract.schema import LoadsResult

from .smg_loads import WorkerLoadResponse

pytestmark = pytest.mark.anyio

SMG_QUERY = {"include": "core,disagg,queues,memory"}


async def test_loads_fit_smg_schema_while_requests_run(target):
    async with Api(target) as api:
        gens = api.start(2, target.long_tokens, prefix="smg-shape")
        try:
            await api.wait_in_flight(2)
            answer = await api.ok("GET", "/v1/loads", params=SMG_QUERY)
        finally:
            await api.ok("POST", "/abort_requests", {"wait": True})
            await asyncio.gather(*gens)
    parsed = WorkerLoadResponse.model_validate(answer)
    contract = LoadsResult.model_validate(answer)
    assert isinstance(answer["timestamp"], str) and answer["timestamp"] and isinstance(answer["version"], str) and answer["version"]
    assert sum(rank.num_total_reqs for rank in parsed.loads) == contract.in_flight >= 2
    assert parsed.aggregate is not None and parsed.aggregate.total_reqs == contract.in_flight
    for rank in answer["loads"]:
        for field in ("dp_rank", "num_running_reqs", "num_waiting_reqs", "num_total_reqs"):
            assert type(rank[field]) is int, rank

