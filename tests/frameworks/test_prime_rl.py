"""prime-rl's calls to vLLM, unchanged, with the plugin loaded.

Source: PrimeIntellect-ai/prime-rl at commit 559b44772e471d1538537b8805cc77f3824a5e64:

- ``src/prime_rl/inference/vllm/server.py:70-80``: prime-rl's own server answers ``POST /pause``
  with vLLM's ``pause_generation(mode="keep", clear_cache=False)`` and ``{"status": "paused"}``,
  ``POST /resume`` with ``{"status": "resumed"}``; its orchestrator sends them around each
  weight update. With the plugin, vLLM's own server gives the same with
  ``/pause?mode=keep&clear_cache=false``.
- ``src/prime_rl/inference/vllm/server.py:213-242``: prime-rl starts vLLM itself, its
  ``run_multi_api_server`` with ``api_server_count`` above 1 (its config sets it to the data
  parallel size, ``packages/prime-rl-configs/src/prime_rl/configs/inference.py:196-212``):
  target ``vllm-prime-rl`` (``frameworks/prime_rl_vllm_server.py``), two API processes, on which a
  contract bump and abort sent to one process must cover the requests of both.
- ``docs/advanced.md:134-135`` and ``src/prime_rl/orchestrator/concurrency.py:101``: load is read
  from ``GET /metrics``, the ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` gauges.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api
from contract.test_api_servers import fresh_call, process_of, start

from .native import client, served_model, vllm_complete
from .test_skyrl import gauge

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm", "vllm-stub", "vllm-api2", "vllm-stub-api3", "vllm-dp2", "vllm-0.26-stub", "vllm-0.26-stub-api3",
                                           "vllm-prime-rl")]


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


@pytest.mark.targets("vllm-prime-rl", "vllm-stub-api3")
async def test_a_bump_and_an_abort_sent_to_one_api_process_of_prime_rls_server_cover_both(target):
    n = 8
    async with Api(target) as api:
        version = (await api.loads())["weight_version"] + "-prime"
        tasks = start(api, n, "prime-both")
        await api.wait_in_flight(n, running=True)
        bump = await fresh_call(api, "POST", "/update_weight_version", {"new_version": version})
        seen = [(await fresh_call(api, "GET", "/v1/loads")) for _ in range(6)]
        await api.generate(2)  # steps the running batch: every request has tokens under the new version
        abort = await fresh_call(api, "POST", "/abort_requests", {"wait": True})
        answers = await asyncio.gather(*tasks)
    assert {process_of(r) for r in answers} - {process_of(abort)}, "setup: every request ran where the abort landed"
    assert abort.json()["aborted"] == n and abort.json()["idle"] is True, abort.json()
    for r in seen:
        assert r.json()["weight_version"] == version, f"process {process_of(r)} kept the old version"
    for r in answers:
        assert r.json()["cancel_reason"] == "abort", f"request on process {process_of(r)}: {r.json()}"
        assert r.json()["weight_versions"][-1]["version"] == version, f"request on process {process_of(r)} missed the bump"
    assert bump.json().get("aborted", 0) == 0
