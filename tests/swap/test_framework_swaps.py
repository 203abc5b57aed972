"""Each framework's weight-swap sequence, as its code sends it, on a real engine with real weights
and the plugin: 2xx everywhere, the requests in flight kept (or returned with their tokens where
the framework pauses in abort mode), the probe equal to the new checkpoint's own output, and one
version everywhere the engine reports it.

Sources (each framework's repository, the files and lines named):
- slime: ``slime/backends/sglang_utils/sglang_engine.py`` (``pause_generation`` ``{}``, abort mode,
  :423-428; ``flush_cache``, :270-290) and ``update_weight_from_tensor.py:278-332`` (tensor chunks
  with ``flush_cache: false`` and the version, no session; continue).
- miles: ``miles/backends/sglang_utils/sglang_engine.py:623-648`` (pause ``retract``, flush,
  ``begin_weight_update``, chunks, ``update_weight_version {abort_all_requests: false}``,
  ``end_weight_update``, continue) and ``update_weight_from_tensor.py:250-321``.
- ROLL: ``roll/distributed/strategy/sglang_strategy.py:333-360`` (tensor update with
  ``flush_cache: false``, no pause, no session; then ``/flush_cache``).
- TRL 1.16: ``trl/experimental/async_grpo/async_grpo_trainer.py:1767-1799`` (``/pause?mode=keep``
  with no ``clear_cache``, the weight transfer, ``/resume``).
- vime: ``vime/backends/vllm_utils/vllm_engine.py`` (``/pause?mode=keep&clear_cache=false``,
  ``/reset_prefix_cache?reset_running_requests=false`` taken as done on any 200, the transfer,
  ``/resume``).

Where the framework transfers weights over NCCL (TRL, vime: vLLM's weight-transfer engine), which
vLLM's CPU build cannot run, the transfer is vLLM's in-place ``/collective_rpc reload_weights``;
the calls around it are the framework's.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api
from frameworks.native import client, sglang_generate

from .helpers import probe, references, send_tensors, sglang_load, sglang_versions, vllm_reload

pytestmark = pytest.mark.anyio

RUNNING = 4


async def flush(http) -> None:
    """SGLang's ``/flush_cache``, retried while SGLang refuses it (as slime and miles loop)."""
    for _ in range(60):
        if (await http.get("/flush_cache")).status_code == 200:
            return
        await asyncio.sleep(0.5)
    raise AssertionError("SGLang refused /flush_cache for 30 s")


@pytest.mark.targets("sglang-weights")
async def test_slimes_abort_pause_flush_and_sessionless_tensor_chunks(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        tasks = [sglang_generate(http, target.long_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        (await http.post("/pause_generation", json={})).raise_for_status()
        outputs = await asyncio.gather(*tasks)
        await flush(http)
        answers = await asyncio.to_thread(send_tensors, target, b, "slime-b", flush=False)
        (await http.post("/continue_generation", json={})).raise_for_status()
        after, _ = await probe(api)
        everywhere = await sglang_versions(api, http)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert [(x["route"], x["status"]) for x in answers] == [("/update_weights_from_tensor", 200)], answers
    for out in outputs:
        assert out["meta_info"]["finish_reason"]["type"] == "abort" and 0 < out["meta_info"]["completion_tokens"]
    assert after == ref_b and everywhere == {"slime-b"} and back == ref_a


@pytest.mark.targets("sglang-weights")
async def test_miles_retract_flush_and_a_session_with_its_own_bump(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        tasks = [sglang_generate(http, target.finish_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        (await http.post("/pause_generation", json={"mode": "retract"})).raise_for_status()
        await flush(http)
        answers = await asyncio.to_thread(send_tensors, target, b, "miles-b", session=True, bump="miles-b")
        (await http.post("/continue_generation", json={})).raise_for_status()
        outputs = await asyncio.gather(*tasks)
        after, _ = await probe(api)
        everywhere = await sglang_versions(api, http)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert [x["status"] for x in answers] == [200, 200, 200, 200], answers
    for out in outputs:
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "length" and meta["completion_tokens"] == target.finish_tokens
        assert meta["weight_versions"][-1]["version"] == "miles-b"
    assert after == ref_b and everywhere == {"miles-b"} and back == ref_a


@pytest.mark.targets("sglang-weights")
async def test_rolls_unpaused_tensor_update_then_its_flush(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        tasks = [sglang_generate(http, target.finish_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        answers = await asyncio.to_thread(send_tensors, target, b, flush=False)
        outputs = await asyncio.gather(*tasks)
        await flush(http)
        after, _ = await probe(api)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert [x["status"] for x in answers] == [200], answers
    for out in outputs:
        assert out["meta_info"]["finish_reason"]["type"] == "length"
    assert after == ref_b and back == ref_a


@pytest.mark.targets("vllm-weights")
async def test_trls_keep_pause_recomputes_the_requests_under_the_new_weights(target):
    a, b = target.checkpoints
    async with Api(target) as api:
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        tasks = api.start(RUNNING, target.finish_tokens, prefix="trl")
        await api.wait_in_flight(RUNNING, running=True)
        paused = await api.post("/pause", params={"mode": "keep"})
        await vllm_reload(api, b)
        resumed = await api.post("/resume")
        results = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        await vllm_reload(api, a)
        back, _ = await probe(api)
    assert paused.json()["status"] == "paused" and resumed.json()["status"] == "resumed"
    for result in results:
        assert result["finish_reason"] == "length" and len(result["output_ids"]) == target.finish_tokens
    assert after == ref_b and cached == 0 and back == ref_a


@pytest.mark.targets("vllm-weights")
async def test_vimes_keep_pause_and_refused_cache_reset_leave_no_stale_prefix(target):
    a, b = target.checkpoints
    async with Api(target) as api:
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        await probe(api)  # cached under A
        tasks = api.start(RUNNING, target.long_tokens, prefix="vime")
        await api.wait_in_flight(RUNNING, running=True)
        await api.ok("POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
        reset = await api.post("/reset_prefix_cache", params={"reset_running_requests": "false"})
        await vllm_reload(api, b)
        await api.ok("POST", "/resume")
        after, cached = await probe(api)
        await api.ok("POST", "/abort_requests", {"wait": True})
        await asyncio.gather(*tasks)
        await vllm_reload(api, a)
        back, _ = await probe(api)
    assert reset.status_code == 200  # vLLM's 200, whatever it did: vime goes on
    assert after == ref_b and cached == 0, "no request after the reload reuses KV from before it"
    assert back == ref_a
