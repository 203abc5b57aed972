"""ROLL's own calls to SGLang workers, unchanged, with the plugin loaded.

Source: alibaba/ROLL at commit 8eb27cc2dc34c4d1310b169d9b86d339004d811a,
``roll/distributed/scheduler/router.py``:

- ``:740-748``: ``abort_requests`` posts ``/abort_request {"rid": request_id}`` for every request
  id to every worker URL, and ``raise_for_status``: a worker that never had the request must
  answer 2xx.
- ``:757``: ``POST /abort_request {"abort_all": true}``.
- ``:781-791``: ``get_worker_loads`` is ``GET /get_load`` (gone from SGLang 0.5.21 on), and
  ``wait_worker_complete`` polls it until every entry has ``num_reqs == 0`` and
  ``num_waiting_reqs == 0``.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api

from .native import client, sglang_generate

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub")]


def worker_complete(loads: list[dict]) -> bool:
    """``router.py:789``."""
    return all(load["num_reqs"] == 0 and load["num_waiting_reqs"] == 0 for load in loads)


async def test_rolls_get_load_counts_requests_and_sees_the_worker_complete_after_abort_all(target):
    n = 3
    async with client(target) as http, Api(target) as api:
        tasks = [sglang_generate(http, target.long_tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        busy = await http.get("/get_load")
        busy.raise_for_status()
        (await http.post("/abort_request", json={"abort_all": True})).raise_for_status()
        idle = await http.get("/get_load")
        await asyncio.gather(*tasks)
    assert sum(load["num_reqs"] for load in busy.json()) == n and not worker_complete(busy.json())
    assert worker_complete(idle.json()), "one poll after the abort sees the worker complete"
    for load in busy.json():
        assert {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens", "ts_tic"} <= set(load)


async def test_rolls_abort_by_rid_on_every_worker_is_2xx_for_unknown_ids_and_exact_for_known(target):
    async with client(target) as http, Api(target) as api:
        task = sglang_generate(http, target.long_tokens, rid="roll-7")
        await api.wait_in_flight(1, running=True)
        unknown = await http.post("/abort_request", json={"rid": "roll-never-sent"})
        unknown.raise_for_status()
        still = await api.loads()
        known = await http.post("/abort_request", json={"rid": "roll-7"})
        known.raise_for_status()
        out = await task
    assert unknown.json()["aborted"] == 0 and still["in_flight"] == 1
    assert known.json()["aborted"] == 1 and known.json()["idle"] is True
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
