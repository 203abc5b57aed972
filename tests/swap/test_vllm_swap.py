"""Weight swaps on a real vLLM with real weights, with the plugin loaded: ``keep`` means what it
means in vLLM (``clear_cache`` true by default), and an in-place reload through vLLM's dev-mode
``/collective_rpc reload_weights`` (vime's path; the NCCL weight-transfer engine has no CPU
path) loads the weights, keeps the requests in flight, and no request admitted after it reuses
KV computed before it.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api

from .probe import probe

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-weights")]

RUNNING = 4


async def reload(api: Api, checkpoint) -> None:
    """vLLM's ``/collective_rpc`` of the workers' ``reload_weights`` from *checkpoint*."""
    response = await api.post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint)}})
    assert response.status_code == 200, f"/collective_rpc -> {response.status_code} {response.text}"


async def references(api: Api, target) -> tuple[list[int], list[int]]:
    """The probe's output with A loaded and with B loaded (each reloaded while idle), ending with A."""
    a, b = target.checkpoints
    outputs = []
    for checkpoint in (b, a):
        await reload(api, checkpoint)
        outputs.append((await probe(api))[0])
    ref_b, ref_a = outputs
    assert ref_a != ref_b, "setup: the two checkpoints give the same greedy probe"
    return ref_a, ref_b


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
        ref_a, ref_b = await references(api, target)
        await probe(api)  # cached under A
        tasks = api.start(RUNNING, target.finish_tokens, prefix="reload")
        await api.wait_in_flight(RUNNING, running=True)
        await api.ok("POST", "/pause", params={"mode": "keep"})
        await reload(api, b)
        await api.ok("POST", "/update_weight_version", {"new_version": "reload-b"})
        await api.ok("POST", "/resume")
        results = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        info = await api.ok("GET", "/weight_info")
        loads = await api.loads()
        await reload(api, a)
        back, _ = await probe(api)
    for result in results:
        assert result["finish_reason"] == "length" and len(result["output_ids"]) == target.finish_tokens
        assert [s["version"] for s in result["weight_versions"]][-1] == "reload-b", result["weight_versions"]
    assert after == ref_b and cached == 0
    assert info["weight_version"] == loads["weight_version"] == "reload-b"
    assert back == ref_a


async def test_after_a_reload_that_keeps_kv_no_new_request_reuses_the_old_weights_cache(target):
    # clear_cache false keeps the prefix cache; a reload with no version bump still scopes it anew.
    a, b = target.checkpoints
    async with Api(target) as api:
        ref_a, ref_b = await references(api, target)
        await probe(api)
        _, warm = await probe(api)
        await api.ok("POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
        await reload(api, b)
        await api.ok("POST", "/resume")
        after, cached = await probe(api)
        await reload(api, a)
        back, _ = await probe(api)
    assert warm > 0
    assert after == ref_b and cached == 0
    assert back == ref_a
