"""SGLang's own /generate goes through the plugin's fence: the two failures measured on SGLang
0.5.23 (the SGLang issue) are fixed, for requests on SGLang's native route."""

import asyncio
import uuid

import pytest

from contract.api import Api, native_body, total_reqs

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub")]


# SGLang 0.5.17 and 0.5.18 label no tokens: there the spans are the plugin's, and must look the same.
@pytest.mark.targets("sglang", "sglang-stub", "sglang-0.5.18-stub", "sglang-0.5.17-stub", "sglang-0.5.16-stub",
                      "sglang-0.5.12-stub")
async def test_version_bump_with_sglangs_usual_payload_keeps_native_requests(target):
    """``POST /update_weight_version {"new_version": ...}`` once aborted 16 of 16 requests."""
    n, tokens = 16, 600
    new = f"v-{uuid.uuid4().hex[:8]}"
    async with Api(target) as api:
        old = (await api.loads())["weight_version"]
        await api.warm(n)
        tasks = [asyncio.create_task(api.post("/generate", native_body(tokens, f"bump-{uuid.uuid4().hex}"))) for _ in range(n)]
        # Every request has output tokens before the bump: SGLang records a change only then.
        await api.wait_for(f"{n} native requests running", lambda l: l["in_flight"] >= n and l["aggregate"]["total_running_reqs"] >= n)
        result = await api.ok("POST", "/update_weight_version", {"new_version": new})
        responses = await asyncio.gather(*tasks)
        after = await api.loads()
    assert result["aborted"] == 0 and result["new_version"] == new and result["previous_version"] == old
    assert after["weight_version"] == new and after["in_flight"] == 0
    for response in responses:
        assert response.status_code == 200, response.text
        out = response.json()
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "length", meta["finish_reason"]
        assert len(out["output_ids"]) == tokens, "no request lost tokens"
        spans = meta["weight_versions"]
        assert spans[-1]["version"] == new and spans[-1]["end"] == tokens, "later tokens carry the new version"
        assert {s["version"] for s in spans} <= {old, new}
    assert any(r.json()["meta_info"]["weight_versions"][0]["version"] == old for r in responses)


async def _held_native_requests_are_counted_then_aborted(target, pause, abort, resume, m=8):
    """Send *m* native requests during a keep pause; they must be counted, then aborted for good."""
    async with Api(target) as api:
        await api.warm(m)
        await pause(api)
        tasks = [asyncio.create_task(api.post("/generate", native_body(300, f"held-{uuid.uuid4().hex}"))) for _ in range(m)]
        loads = await api.wait_in_flight(m)
        assert loads["in_flight"] == total_reqs(loads) == m, "requests held during the pause are counted"
        assert loads["paused"] is True, "SGLang's own pause is the contract's pause too"
        await abort(api)
        # They come back now, during the pause, with no tokens.
        responses = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        assert (await api.loads())["in_flight"] == 0
        await resume(api)
        after = await api.loads()
    assert after["in_flight"] == 0 and total_reqs(after) == 0, "nothing generates after resume"
    for response in responses:
        assert response.status_code == 200, response.text
        out = response.json()
        assert out["meta_info"]["finish_reason"]["type"] == "abort"
        assert out["output_ids"] == []


async def _contract_pause(api):
    await api.ok("POST", "/pause", {"mode": "keep"})


async def _contract_abort(api):
    result = await api.ok("POST", "/abort_requests", {"wait": True})
    assert result["idle"] is True and result["aborted"] == 8


async def _contract_resume(api):
    await api.ok("POST", "/resume")


async def test_native_requests_held_by_a_keep_pause_are_counted_and_aborted(target):
    await _held_native_requests_are_counted_then_aborted(target, _contract_pause, _contract_abort, _contract_resume)


async def _sglang_native(api, path, body):
    # SGLang's own control routes answer 200 with a body that is not always JSON.
    response = await api.post(path, body)
    assert response.status_code == 200, f"{path} -> {response.status_code} {response.text}"


async def _sglang_pause(api):
    await _sglang_native(api, "/pause_generation", {"mode": "in_place"})


async def _sglang_abort(api):
    await _sglang_native(api, "/abort_request", {"abort_all": True})


async def _sglang_resume(api):
    await _sglang_native(api, "/continue_generation", {})


async def test_sglangs_own_abort_all_reaches_requests_held_by_its_own_pause(target):
    """The measured failure, with SGLang's own routes: the abort used to be lost."""
    await _held_native_requests_are_counted_then_aborted(target, _sglang_pause, _sglang_abort, _sglang_resume)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_native_token_id_outside_the_vocabulary_is_a_400_not_a_dead_engine(target, stream):
    """SGLang 0.5.23 passes native ``input_ids`` to its embedding unchecked: one id past the
    vocabulary killed the scheduler and every request with it. With the plugin it is a 400."""
    async with Api(target) as api:
        survivor = asyncio.create_task(api.post("/generate", native_body(400, f"oov-survivor-{uuid.uuid4().hex}")))
        await api.wait_in_flight(1)
        bad = {**native_body(4, f"oov-{uuid.uuid4().hex}"), "input_ids": [1, 10**6], "stream": stream}
        response = await api.post("/generate", bad)
        batch = {**native_body(4, f"oov-batch-{uuid.uuid4().hex}"), "input_ids": [[1, 2], [3, 10**6]]}
        batch.pop("rid")
        batch_response = await api.post("/generate", batch)
        after = await api.post("/generate", native_body(8, f"oov-after-{uuid.uuid4().hex}"))
        kept = await survivor
    if stream:
        # A stream has already said 200; SGLang sends the error as the stream's one event.
        assert response.status_code == 200 and "vocabulary" in response.text and "input_ids[1]" in response.text, response.text
    else:
        assert response.status_code == 400, response.text
        assert "input_ids[1]" in response.json()["error"]["message"] and "vocabulary" in response.text
    assert batch_response.status_code == 400 and "input_ids[1][1]" in batch_response.text, batch_response.text
    assert after.status_code == 200 and len(after.json()["output_ids"]) == 8
    assert kept.status_code == 200 and len(kept.json()["output_ids"]) == 400
