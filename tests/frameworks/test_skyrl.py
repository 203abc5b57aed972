"""SkyRL's own calls to vLLM, unchanged, with the plugin loaded.

Source: NovaSky-AI/SkyRL at commit a9564572eb8e91076be43c1bd5e4615e3de17265,
``skyrl/backends/skyrl_train/inference_servers/remote_inference_client.py``:

- ``:122-...``: ``PauseMode`` (``abort``, ``wait``, ``keep``), "the ``mode`` query parameter on
  vLLM's ``/pause`` endpoint".
- ``:985-1009``: ``pause(mode=KEEP, clear_cache=False)`` posts ``/pause`` with the query
  ``{"mode": mode.value, "clear_cache": str(clear_cache).lower()}`` to every server;
  ``:1011-1013`` ``resume`` posts ``/resume``; ``_call_server`` (``:955-960``) raises on a
  non-2xx status and keeps ``{"status", "body"}``.
- ``skyrl/train/utils/vllm_metrics_scraper.py``: the ``num_requests_running`` and
  ``num_requests_waiting`` gauges of ``GET /metrics``.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api

from .native import client, served_model, vllm_complete

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm", "vllm-stub", "vllm-0.26-stub", "vllm-skyrl")]


async def skyrl_pause(http, mode: str = "keep", clear_cache: bool = False) -> dict:
    """``RemoteInferenceClient.pause`` for one server."""
    response = await http.post("/pause", params={"mode": mode, "clear_cache": str(clear_cache).lower()})
    response.raise_for_status()
    return {"status": response.status_code, "body": response.json()}


async def skyrl_resume(http) -> dict:
    """``RemoteInferenceClient.resume`` for one server."""
    response = await http.post("/resume")
    response.raise_for_status()
    return {"status": response.status_code, "body": response.json()}


def gauge(metrics: str, name: str) -> float:
    """The sum of one vLLM gauge over its label sets, as a scraper reads it."""
    values = [float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith(name + "{")]
    assert values, f"{name} is not on /metrics"
    return sum(values)


async def test_skyrls_keep_pause_freezes_requests_that_finish_after_resume(target):
    tokens = target.long_tokens // 4
    async with client(target) as http, Api(target) as api:
        model = await served_model(http)
        tasks = [vllm_complete(http, model, tokens) for _ in range(3)]
        await api.wait_in_flight(3, running=True)
        paused = await skyrl_pause(http, "keep", clear_cache=False)
        frozen = await api.loads()
        assert not any(t.done() for t in tasks)
        resumed = await skyrl_resume(http)
        outputs = await asyncio.gather(*tasks)
    assert paused["body"]["status"] == "paused" and resumed["body"]["status"] == "resumed", "vLLM's own answers"
    assert frozen["in_flight"] == 3 and frozen["paused"] is True
    for out in outputs:
        assert out["choices"][0]["finish_reason"] == "length"


async def test_skyrls_wait_pause_drains_and_abort_pause_cuts(target):
    tokens = target.long_tokens // 4
    async with client(target) as http, Api(target) as api:
        model = await served_model(http)
        draining = [vllm_complete(http, model, tokens) for _ in range(2)]
        await api.wait_in_flight(2, running=True)
        await skyrl_pause(http, "wait", clear_cache=True)
        drained = await api.loads()
        finished = await asyncio.gather(*draining)
        await skyrl_resume(http)
        cut = [vllm_complete(http, model, target.long_tokens) for _ in range(2)]
        await api.wait_in_flight(2, running=True)
        await skyrl_pause(http, "abort")
        after_abort = await api.loads()
        aborted = await asyncio.gather(*cut)
        await skyrl_resume(http)
        metrics = (await http.get("/metrics")).text
    assert drained["in_flight"] == 0
    assert all(out["choices"][0]["finish_reason"] == "length" for out in finished), "wait lets them finish"
    assert after_abort["in_flight"] == 0
    assert all(out["choices"][0]["finish_reason"] == "abort" for out in aborted)
    assert gauge(metrics, "vllm:num_requests_running") == 0 and gauge(metrics, "vllm:num_requests_waiting") == 0
