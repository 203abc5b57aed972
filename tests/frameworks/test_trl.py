"""TRL's calls to vLLM, unchanged, with the plugin loaded.

Source: huggingface/trl at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8,
``trl/experimental/async_grpo/vllm_client.py:78-84``: ``pause`` posts ``/pause`` with the query
``{"mode": "keep"}`` ("keeping the KV cache warm, so weights can be swapped in"), ``resume``
posts ``/resume``; neither reads the answer.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api

from .native import client, served_model, vllm_complete

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm", "vllm-stub")]


async def test_trls_keep_pause_holds_new_requests_and_resume_runs_everything(target):
    tokens = target.long_tokens // 4
    async with client(target) as http, Api(target) as api:
        model = await served_model(http)
        running = [vllm_complete(http, model, tokens) for _ in range(2)]
        await api.wait_in_flight(2, running=True)
        paused = await http.post("/pause", params={"mode": "keep"})
        arriving = vllm_complete(http, model, 8)
        held = await api.wait_in_flight(3)
        assert not any(t.done() for t in [*running, arriving])
        resumed = await http.post("/resume")
        outputs = await asyncio.gather(*running, arriving)
    assert paused.status_code == 200 and resumed.status_code == 200
    assert held["in_flight"] == 3 and held["paused"] is True
    for out in outputs:
        assert out["choices"][0]["finish_reason"] == "length"
