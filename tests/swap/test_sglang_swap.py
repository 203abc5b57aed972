"""Weight swaps on a real SGLang with real weights, through SGLang's own routes as the frameworks
send them, with the plugin loaded: each answers 2xx, loads the weights (the probe equals the
checkpoint's own output), keeps the requests in flight, and leaves one version everywhere SGLang
reports it.

Without the plugin, the first two sequences fail on SGLang 0.5.21-0.5.23 (a 400 from the update:
its cache flush is refused while requests are frozen in place, and the tensor update is refused
outside a weight-update session), and on 0.5.20 the first one kills the scheduler
(docs/engine-notes.md, "SGLang weight updates").
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api
from frameworks.native import client, sglang_generate

from .helpers import probe, references, send_tensors, sglang_load, sglang_versions

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang-weights")]

RUNNING = 4


async def test_areals_in_place_pause_and_a_stock_disk_update_load_the_weights_and_keep_the_requests(target):
    # AReaL's sequence (areal/engine/sglang_remote.py): pause in place, update from disk with
    # SGLang's defaults (flush_cache true) and the new version, continue.
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        await probe(api)  # cached under A: a reuse after the swap would show
        before = (await api.loads())["weight_version"]
        tasks = [sglang_generate(http, target.finish_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        (await http.post("/pause_generation", json={"mode": "in_place"})).raise_for_status()
        answer = await sglang_load(http, b, weight_version="swap-b")
        (await http.post("/continue_generation", json={})).raise_for_status()
        outputs = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        everywhere = await sglang_versions(api, http)
        await sglang_load(http, a, weight_version="swap-a")
        back, _ = await probe(api)
    assert "Weight version updated to swap-b" in answer["message"], answer
    for out in outputs:
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "length" and meta["completion_tokens"] == target.finish_tokens
        spans = meta["weight_versions"]
        assert [s["version"] for s in spans] == [before, "swap-b"], spans
        assert spans[0]["end"] == spans[1]["start"] > 0
    assert after == ref_b and cached == 0, "the probe after the swap decodes with B, on no KV from before it"
    assert everywhere == {"swap-b"}
    assert back == ref_a


async def test_a_contract_keep_pause_and_a_sessionless_tensor_update_load_the_weights(target):
    # slime's tensor sync (sglang_engine.py: update_weights_from_tensor without a session, with
    # SGLang's defaults) between the contract's keep pause (which recomputes the frozen requests'
    # KV on resume, under the new weights) and resume.
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        tasks = api.start(RUNNING, target.finish_tokens, prefix="keep")
        await api.wait_in_flight(RUNNING, running=True)
        paused = await api.ok("POST", "/pause", {"mode": "keep"})
        answers = await asyncio.to_thread(send_tensors, target, b, "tensor-b")
        await api.ok("POST", "/resume")
        results = await asyncio.gather(*tasks)
        after, _ = await probe(api)
        everywhere = await sglang_versions(api, http)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert paused == {"is_paused": True, "mode": "keep"}
    [update] = answers
    assert update["status"] == 200 and update["body"]["success"] is True, update
    for result in results:
        assert result["finish_reason"] == "length" and len(result["output_ids"]) == target.finish_tokens
        assert [s["version"] for s in result["weight_versions"]][-1] == "tensor-b"
    assert after == ref_b
    assert everywhere == {"tensor-b"}
    assert back == ref_a


async def test_an_update_that_arrives_unpaused_runs_at_once_and_the_requests_go_on_under_the_new_weights(target):
    # Without a pause SGLang's update waits on its writer lock for every request in flight to end;
    # the plugin pauses in place for it instead.
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        tasks = api.start(RUNNING, target.long_tokens, prefix="unpaused")
        await api.wait_in_flight(RUNNING, running=True)
        await sglang_load(http, b, weight_version="unpaused-b")
        loads = await api.loads()
        after, _ = await probe(api)
        await api.ok("POST", "/abort_requests", {"wait": True})
        results = await asyncio.gather(*tasks)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert loads["in_flight"] >= RUNNING and loads["paused"] is False, "the update returned while the requests ran on"
    for result in results:
        assert result["cancel_reason"] == "abort"
        assert [s["version"] for s in result["weight_versions"]][-1] == "unpaused-b", result["weight_versions"]
    assert after == ref_b
    assert back == ref_a
