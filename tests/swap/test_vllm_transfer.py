"""The RL frameworks' weight swaps through vLLM's weight-transfer routes, on a real vLLM with real
weights and the plugin: every call 2xx, the requests in flight kept and finished, the probe equal
to the new checkpoint's own output with none of its prompt served from KV computed before the
swap, and a version set by ``/finish_weight_update`` one everywhere the server reports it.

The transfer's backend is the tests' ``file`` (``file_transfer.py``: the CPU build has neither
NCCL nor CUDA IPC), whose ``update_info`` names the checkpoint to load; the calls around it and
their bodies are the frameworks'. Each checkpoint's reference output comes from vLLM's own
in-place ``/collective_rpc reload_weights``, so the transfer must load what vLLM itself loads.

Sources (each framework's repository, the files named):
- TRL 1.16: ``trl/experimental/async_grpo/async_grpo_trainer.py:1767-1799`` (``_sync_weight``:
  pause, the transfer, resume) and ``trl/experimental/async_grpo/weight_transfer.py`` (the HTTP
  calls: ``/init_weight_transfer_engine {"init_info"}`` once at the start, ``/pause`` with
  ``mode=keep`` only, ``/start_weight_update {"is_checkpoint_format": true}``, ``/update_weights
  {"update_info"}``, ``/finish_weight_update {}``, ``/resume`` with no body).
- vime: ``vime/backends/vllm_utils/vllm_engine.py`` (``pause_generation``:
  ``/pause?mode=keep&clear_cache=false`` with ``{}``; ``flush_cache``: ``/reset_prefix_cache``
  with ``reset_running_requests`` and ``reset_external`` false, done at any 200;
  ``init_weight_transfer_engine``, ``start_weight_update``, ``/update_weights {"update_info"}``,
  ``finish_weight_update`` ``{}``; ``continue_generation``: ``/resume {}``) and
  ``vime/backends/megatron_utils/update_weight/update_weight_from_distributed.py`` (the session:
  start with ``is_checkpoint_format`` true, the updates, finish).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from contract.api import Api

from .helpers import probe, references, vllm_reload

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-weights")]

RUNNING = 4

# The servers whose weight-transfer engine was initialized: a trainer does it once, at its start.
_initialized: set[str] = set()


class Calls:
    """Sends a framework's calls and keeps every answer, for the check that all were 2xx."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.answers: list[tuple[str, int, str]] = []

    async def post(self, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        """POST as :meth:`Api.post` does, the answer kept."""
        response = await self.api.post(path, body, **kwargs)
        self.answers.append((path, response.status_code, response.text))
        return response

    def failed(self) -> list[tuple[str, int, str]]:
        """The answers that were not 2xx."""
        return [answer for answer in self.answers if not 200 <= answer[1] < 300]

    async def init_transfer(self) -> None:
        """``/init_weight_transfer_engine``, once per server (the file backend agrees on nothing)."""
        if self.api.target.url in _initialized:
            return
        if (await self.post("/init_weight_transfer_engine", {"init_info": {}})).status_code == 200:
            _initialized.add(self.api.target.url)

    async def transfer(self, checkpoint: Path, finish: dict | None = None) -> None:
        """One weight-transfer session loading *checkpoint*, as both frameworks send it: start in
        checkpoint format, one update, finish (with *finish* as its body, ``{}`` by default)."""
        await self.post("/start_weight_update", {"is_checkpoint_format": True})
        await self.post("/update_weights", {"update_info": {"path": str(checkpoint)}})
        await self.post("/finish_weight_update", finish if finish is not None else {})


def assert_finished(results: list[dict], tokens: int) -> None:
    """Every kept request ran to its end, with all its tokens."""
    for result in results:
        assert result["finish_reason"] == "length" and len(result["output_ids"]) == tokens, result


async def test_trls_keep_pause_and_transfer_load_the_weights_and_keep_the_requests(target):
    a, b = target.checkpoints
    async with Api(target) as api:
        calls = Calls(api)
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        await calls.init_transfer()
        _, warm = await probe(api)  # cached under A
        tasks = api.start(RUNNING, target.finish_tokens, prefix="trl-xfer")
        await api.wait_in_flight(RUNNING, running=True)
        paused = await calls.post("/pause", params={"mode": "keep"})
        await calls.transfer(b)
        resumed = await calls.post("/resume")
        results = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        await calls.transfer(a)
        back, _ = await probe(api)
    assert calls.failed() == [], calls.failed()
    assert paused.json()["status"] == "paused" and resumed.json()["status"] == "resumed"
    assert_finished(results, target.finish_tokens)
    assert warm > 0, "setup: the probe's prompt is cached"
    assert after == ref_b and cached == 0, "the transfer loaded B, and no KV from before it is reused"
    assert back == ref_a


async def test_vimes_keep_kv_pause_refused_reset_and_transfer_leave_no_stale_prefix(target):
    a, b = target.checkpoints
    async with Api(target) as api:
        calls = Calls(api)
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        await calls.init_transfer()
        _, warm = await probe(api)  # cached under A, and kept by the pause below
        tasks = api.start(RUNNING, target.finish_tokens, prefix="vime-xfer")
        await api.wait_in_flight(RUNNING, running=True)
        await calls.post("/pause", {}, params={"mode": "keep", "clear_cache": "false"})
        # requests' params: its False goes as "False".
        reset = await calls.post("/reset_prefix_cache", params={"reset_running_requests": "False", "reset_external": "False"})
        await calls.transfer(b)
        await calls.post("/resume", {})
        results = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        await calls.transfer(a)
        back, _ = await probe(api)
    assert calls.failed() == [], calls.failed()
    assert reset.status_code == 200  # vLLM's 200, whether it reset or not: vime goes on
    assert_finished(results, target.finish_tokens)
    assert warm > 0, "setup: the probe's prompt is cached"
    assert after == ref_b and cached == 0, "no request after the transfer reuses KV from before it"
    assert back == ref_a


async def test_a_version_set_by_finish_weight_update_is_one_everywhere(target):
    a, b = target.checkpoints
    version = f"xfer-b-{uuid.uuid4().hex[:8]}"  # the server is shared by the tests: a name of this run's
    async with Api(target) as api:
        calls = Calls(api)
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        await calls.init_transfer()
        tasks = api.start(RUNNING, target.finish_tokens, prefix="version-xfer")
        await api.wait_in_flight(RUNNING, running=True)
        await calls.post("/pause", params={"mode": "keep"})
        await calls.transfer(b, finish={"weight_version": version})
        await calls.post("/resume")
        results = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        loads = await api.loads()
        info = await api.ok("GET", "/weight_info")
        await calls.transfer(a)
        back, _ = await probe(api)
    assert calls.failed() == [], calls.failed()
    assert_finished(results, target.finish_tokens)
    assert after == ref_b and cached == 0
    assert back == ref_a
    assert loads["weight_version"] == version, loads
    assert info["weight_version"] == version, info
    for result in results:
        assert result["weight_versions"][-1]["version"] == version, result["weight_versions"]
