"""SGLang 0.5.23 with patches/sglang-0.5.23-rl-control.patch applied and the plugin NOT loaded:
its own routes behave as the patch's header says (the plugin's fixes, without the plugin)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from .native import Native

pytestmark = [pytest.mark.anyio, pytest.mark.patched_engine("sglang")]

# About 5 s of decoding with the tiny model: no request finishes while a test arranges things.
LONG = 1500


def generate_body(rid: str, max_new_tokens: int = LONG) -> dict:
    """A native /generate request, as RL frameworks send it (token ids, ignore_eos)."""
    return {"rid": rid, "input_ids": [1, 15, 27, 33, 41],
            "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True}}


async def test_the_plugin_is_not_loaded(patched_sglang):
    async with Native(patched_sglang) as sglang:
        response = await sglang.http.post("/partial_generate", json={"input_ids": [1]})
        info = await sglang.ok("GET", "/model_info")
    assert response.status_code == 404, "the contract's route is the plugin's: it must be absent"
    assert "weight_version" in info


async def test_a_version_bump_keeps_a_running_request_and_abort_by_rid_counts_it_once(patched_sglang):
    rid, new = f"bump-{uuid.uuid4().hex}", f"v-{uuid.uuid4().hex[:8]}"
    async with Native(patched_sglang) as sglang:
        task = asyncio.create_task(sglang.http.post("/generate", json=generate_body(rid)))
        await sglang.wait_counts("the request running", lambda running, waiting: running >= 1)
        # SGLang's usual payload: without the patch this aborted the request.
        bump = await sglang.ok("POST", "/update_weight_version", {"new_version": new})
        # Still in flight after the bump: the abort finds it (a request the bump had aborted would
        # count 0, its abort already sent).
        first = await sglang.ok("POST", "/abort_request", {"rid": rid})
        again = await sglang.ok("POST", "/abort_request", {"rid": rid})
        response = await task
        unknown = await sglang.ok("POST", "/abort_request", {"rid": f"nobody-{uuid.uuid4().hex}"})
        await sglang.wait_counts("the server idle", lambda running, waiting: running == waiting == 0)
    assert bump["success"] is True and bump["new_version"] == new
    assert (first, again, unknown) == ({"aborted": 1}, {"aborted": 0}, {"aborted": 0})
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < len(out["output_ids"]) < LONG
    last = out["meta_info"]["weight_versions"][-1]
    assert last["version"] == new and last["end"] - last["start"] >= 1, "it generated on after the bump, under the new version"


async def test_requests_held_at_the_pause_gate_are_counted_and_aborted_for_good(patched_sglang):
    n = 3
    rids = [f"held-{uuid.uuid4().hex}" for _ in range(n)]
    async with Native(patched_sglang) as sglang:
        await sglang.wait_counts("the server idle", lambda running, waiting: running == waiting == 0)
        await sglang.ok("POST", "/pause_generation", {"mode": "in_place"})
        try:
            tasks = [asyncio.create_task(sglang.http.post("/generate", json=generate_body(rid, 300))) for rid in rids]
            # Held before the scheduler: /v1/loads counts them as waiting (SGLang's snapshot did not).
            held = await sglang.wait_counts(f"{n} requests held", lambda running, waiting: waiting >= n)
            result = await sglang.ok("POST", "/abort_request", {"abort_all": True})
            # They answer now, during the pause, with no tokens.
            responses = await asyncio.wait_for(asyncio.gather(*tasks), 60)
            during = await sglang.counts()
        finally:
            await sglang.http.post("/continue_generation", json={})
        after = await sglang.http.post("/generate", json=generate_body(f"after-{uuid.uuid4().hex}", 8))
        idle = await sglang.wait_counts("the server idle", lambda running, waiting: running == waiting == 0)
    assert held == (0, n) and result == {"aborted": n}
    assert during == (0, 0), "nothing is held once aborted, also while paused"
    for response in responses:
        assert response.status_code == 200, response.text
        out = response.json()
        assert out["meta_info"]["finish_reason"]["type"] == "abort" and out["output_ids"] == []
    assert after.status_code == 200 and len(after.json()["output_ids"]) == 8, "the server still generates"
    assert idle == (0, 0), "no aborted request ran after continue_generation"
