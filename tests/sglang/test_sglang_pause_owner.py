"""SGLang's pause has one owner: SGLang's own ``/pause_generation`` and ``/continue_generation``
and the contract's ``/pause`` and ``/resume`` change one state, in every order, and every other
call (``/is_paused``, ``/v1/loads``, an abort by id) sees it.

The measured failure, on a real SGLang 0.5.23 before: after SGLang's own ``/pause_generation
{"mode": "in_place"}``, a contract abort by id with wait and a 10 s timeout came back
``timed_out: true, in_flight: 1`` (the plugin did not know the scheduler was frozen, so the
aborted request could never come back), and ``/is_paused`` said false.
"""

import asyncio
import uuid

import pytest

from contract.api import Api

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub")]

# How each pause is made, and the contract mode /is_paused must report for it.
PAUSES = {
    "native-in_place": ("/pause_generation", {"mode": "in_place"}, "keep"),
    "native-retract": ("/pause_generation", {"mode": "retract"}, "keep"),
    "native-abort": ("/pause_generation", {}, "abort"),
    "contract-keep": ("/pause", {"mode": "keep"}, "keep"),
    "contract-abort": ("/pause", {"mode": "abort"}, "abort"),
}
RESUMES = {"native-continue": ("/continue_generation", {}), "contract-resume": ("/resume", None)}


def generate_body(request_id: str, tokens: int) -> dict:
    return {"input_ids": [1, 15, 27, 33], "request_id": request_id, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}


async def post_ok(api: Api, path: str, body) -> dict:
    response = await api.post(path, body)
    assert response.status_code == 200, f"{path} {body} -> {response.status_code} {response.text}"
    return response.json()


async def test_an_abort_by_id_during_sglangs_own_in_place_pause_returns_the_request_with_its_tokens(target):
    async with Api(target) as api:
        await api.warm(1)
        rid = f"owner-{uuid.uuid4().hex}"
        running = asyncio.create_task(api.post("/partial_generate", generate_body(rid, target.long_tokens)))
        await api.wait_for("the request has tokens", lambda loads: loads["aggregate"]["total_running_reqs"] >= 1)
        await asyncio.sleep(0.3)  # a few decode steps: the request has tokens to return
        await post_ok(api, "/pause_generation", {"mode": "in_place"})
        state = await api.ok("GET", "/is_paused")
        assert state == {"is_paused": True, "mode": "keep"}, "SGLang's own pause is reported"
        result = await api.ok("POST", "/abort_requests", {"request_ids": [rid], "wait": True, "timeout_s": 10})
        answer = await asyncio.wait_for(running, 60)
        await post_ok(api, "/continue_generation", {})
        after = await api.ok("GET", "/is_paused")
    assert result["timed_out"] is False and result["in_flight"] == 0 and result["aborted"] == 1, result
    assert answer.status_code == 200, answer.text
    out = answer.json()
    assert out["cancelled"] is True and out["cancel_reason"] == "abort" and 0 < len(out["output_ids"]) < target.long_tokens, out
    assert after == {"is_paused": False, "mode": None}


@pytest.mark.parametrize("resume", list(RESUMES))
@pytest.mark.parametrize("pause", list(PAUSES))
async def test_every_pause_is_reported_holds_new_work_and_is_ended_by_every_resume(target, pause, resume):
    path, body, mode = PAUSES[pause]
    async with Api(target) as api:
        await api.warm(1)
        answer = await post_ok(api, path, body)
        assert (await api.ok("GET", "/is_paused")) == {"is_paused": True, "mode": mode}
        assert (await api.loads())["paused"] is True
        if path == "/pause":
            assert answer["is_paused"] is True and answer["mode"] == mode
        refuses_new = path == "/pause" and mode == "abort"
        held = asyncio.create_task(api.post("/partial_generate", generate_body(f"held-{uuid.uuid4().hex}", 4)))
        if refuses_new:
            await asyncio.wait_for(asyncio.shield(held), 60)  # answered during the pause
        else:
            await api.wait_in_flight(1)
            await asyncio.sleep(0.2)
        held_during_pause = not held.done()
        resume_path, resume_body = RESUMES[resume]
        resumed = await post_ok(api, resume_path, resume_body)
        assert resumed["is_paused"] is False, resumed
        assert (await api.ok("GET", "/is_paused")) == {"is_paused": False, "mode": None}
        finished = await asyncio.wait_for(held, 60)
        later = await asyncio.wait_for(api.post("/partial_generate", generate_body(f"later-{uuid.uuid4().hex}", 4)), 60)
    if refuses_new:
        # The contract's abort pause refuses new work at once (cancelled, no tokens).
        assert finished.status_code == 200 and finished.json()["cancelled"] is True, finished.text
    else:
        assert held_during_pause, f"a request sent during {pause} waited for the resume"
        assert finished.status_code == 200 and finished.json()["finish_reason"] == "length", finished.text
    assert later.status_code == 200 and later.json()["finish_reason"] == "length", later.text
