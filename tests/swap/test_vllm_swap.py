"""Weight swaps on a real vLLM with real weights, with the plugin loaded: ``keep`` means what it
means in vLLM (``clear_cache`` true by default), and an in-place reload through vLLM's dev-mode
``/collective_rpc reload_weights`` (SkyRL's and prime-rl's in-place loads come to this; the
weight-transfer routes are ``test_vllm_transfer.py``'s) loads the weights, keeps the requests in flight, and no request admitted after it reuses
KV computed before it.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api

from .helpers import probe, references, vllm_reload

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-weights")]

RUNNING = 4


async def test_keep_clears_the_prefix_cache_unless_told_not_to_as_vllm_does(target):
    # TRL sends /pause?mode=keep with no clear_cache ("freeze in-flight requests and clear caches").
    async with Api(target) as api:
        await probe(api)
        _, warm = await probe(api)
        await api.ok("POST", "/pause", params={"mode": "keep"})
        await api.ok("POST", "/resume")
        _, after_default = await probe(api)
        await api.ok("POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
        await api.ok("POST", "/resume")
        _, after_keep_kv = await probe(api)
    assert warm > 0, "setup: the probe's prompt is cached"
    assert after_default == 0, "vLLM's default keep clears the prefix cache"
    assert after_keep_kv == warm, "clear_cache false keeps it"


async def test_a_keep_pause_and_a_reload_load_the_weights_and_keep_the_requests(target):
    a, b = target.checkpoints
    async with Api(target) as api:
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        await probe(api)  # cached under A
        tasks = api.start(RUNNING, target.finish_tokens, prefix="reload")
        await api.wait_in_flight(RUNNING, running=True)
        await api.ok("POST", "/pause", params={"mode": "keep"})
        await vllm_reload(api, b)
        await api.ok("POST", "/update_weight_version", {"new_version": "reload-b"})
        await api.ok("POST", "/resume")
        results = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        info = await api.ok("GET", "/weight_info")
        loads = await api.loads()
        await vllm_reload(api, a)
        back, _ = await probe(api)
    for result in results:
        assert result["finish_reason"] == "length" and len(result["output_ids"]) == target.finish_tokens
        assert [s["version"] for s in result["weight_versions"]][-1] == "reload-b", result["weight_versions"]
    assert after == ref_b and cached == 0
    assert info["weight_version"] == loads["weight_version"] == "reload-b"
    assert back == ref_a


async def test_skyrls_keep_kv_pause_and_a_reload_with_no_version_leave_no_stale_prefix(target):
    # SkyRL (skyrl worker_dispatch.py:697-711, remote_inference_client.py:985-1017) and prime-rl
    # (utils/client.py:253-320) pause with clear_cache false, which keeps the prefix cache, load,
    # resume, and tell the engine no version: the reload still scopes the cache anew.
    a, b = target.checkpoints
    async with Api(target) as api:
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        await probe(api)
        _, warm = await probe(api)
        await api.ok("POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
        await vllm_reload(api, b)
        await api.ok("POST", "/resume")
        after, cached = await probe(api)
        await vllm_reload(api, a)
        back, _ = await probe(api)
    assert warm > 0
    assert after == ref_b and cached == 0
    assert back == ref_a
