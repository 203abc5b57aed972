"""prime-rl's calls to vLLM, unchanged, with the plugin loaded.

Source: PrimeIntellect-ai/prime-rl at commit 559b44772e471d1538537b8805cc77f3824a5e64:

- ``src/prime_rl/inference/vllm/server.py:70-80``: prime-rl's own server answers ``POST /pause``
  with vLLM's ``pause_generation(mode="keep", clear_cache=False)`` and ``{"status": "paused"}``,
  ``POST /resume`` with ``{"status": "resumed"}``; its orchestrator sends them around each
  weight update. With the plugin, vLLM's own server gives the same with
  ``/pause?mode=keep&clear_cache=false``.
- ``docs/advanced.md:134-135`` and ``src/prime_rl/orchestrator/concurrency.py:101``: load is read
  from ``GET /metrics``, the ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` gauges.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api

from .native import client, served_model, vllm_complete
from .test_skyrl import gauge

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm", "vllm-stub", "vllm-api2", "vllm-stub-api3", "vllm-dp2", "vllm-0.26-stub", "vllm-0.26-stub-api3")]


async def test_prime_rls_keep_pause_answers_as_its_server_and_the_gauges_see_the_requests(target):
    tokens = target.long_tokens // 4
    async with client(target) as http, Api(target) as api:
        model = await served_model(http)
        tasks = [vllm_complete(http, model, tokens) for _ in range(2)]
        await api.wait_in_flight(2, running=True)
        paused = await http.post("/pause?mode=keep&clear_cache=false")
        paused.raise_for_status()
        during = (await http.get("/metrics")).text
        resumed = await http.post("/resume")
        resumed.raise_for_status()
        outputs = await asyncio.gather(*tasks)
    assert paused.json()["status"] == "paused" and resumed.json()["status"] == "resumed"
    assert gauge(during, "vllm:num_requests_running") + gauge(during, "vllm:num_requests_waiting") == 2
    for out in outputs:
        assert out["choices"][0]["finish_reason"] == "length"
