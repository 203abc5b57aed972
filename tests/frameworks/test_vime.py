"""vime's calls to vLLM, unchanged, with the plugin loaded.

Source: vllm-project/vime at commit 887ea48cd6d45f68e95461606c2011768bb765cc,
``vime/backends/vllm_utils/server_control.py``: ``abort_inflight_requests`` posts
``/abort_requests`` with the body ``{}`` to every worker ("one best-effort sweep ... the caller
may re-issue it to converge"); vLLM answers ``{"status": "aborted", "aborted": N}``.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api

from .native import client, served_model, vllm_complete

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm", "vllm-stub")]


async def test_vimes_one_sweep_converges_the_worker_is_idle_when_it_answers(target):
    n = 4
    async with client(target) as http, Api(target) as api:
        model = await served_model(http)
        tasks = [vllm_complete(http, model, target.long_tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        response = await http.post("/abort_requests", json={})
        response.raise_for_status()
        loads = await api.loads()
        outputs = await asyncio.gather(*tasks)
        again = await http.post("/abort_requests", json={})
    body = response.json()
    assert body["status"] == "aborted" and body["aborted"] == n, "vLLM's fields, the count true"
    assert body["in_flight"] == 0 and loads["in_flight"] == 0, "the sweep answers once the requests are released"
    assert again.json()["aborted"] == 0, "a second sweep finds nothing"
    for out in outputs:
        assert out["choices"][0]["finish_reason"] == "abort"
