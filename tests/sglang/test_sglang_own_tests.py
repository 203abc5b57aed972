"""SGLang's own tests of the routes the plugin replaces or shares, held against the plugin: the same
calls and assertions, written here, on a server with the plugin (drop-in means they pass).

From sgl-project/sglang (docs/engine-notes.md, "SGLang's own route tests", lists them and what is
left out: GPUs, an 8B model, NCCL):
- ``sglang/test/kits/abort_timeout_kit.py`` (``AbortAllMixin``, shipped in the 0.5.23 wheel):
  ``/abort_request {"abort_all": true}`` ends every request with ``abort``, the server lives;
- ``test/manual/entrypoints/http_server/test_abort_request.py``: an abort by ``rid`` ends that
  request only;
- ``sglang/test/kits/pause_generation_kit.py`` (``PauseResumeInPlaceMixin``): nothing finishes
  during an ``in_place`` pause, every request completes after ``/continue_generation``;
- ``test/manual/test_weight_version.py``: ``/update_weight_version`` and the version in
  ``/model_info`` and each answer's ``meta_info`` (its ``/get_weight_version`` calls are left out:
  SGLang itself answers 404 there from 0.5.12 and has no such route from 0.5.21);
- ``test/registered/scheduler/test_load_snapshot_server.py``: ``/v1/loads`` has a load per DP rank.

The one assertion the plugin answers differently on purpose: ``/update_weight_version`` without
``abort_all_requests`` keeps the requests in flight (SGLang aborts them all); the upstream tests
always say which they want.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from engine_versions import SUPPORTED

REAL_RELEASES = tuple(str(r) for r in SUPPORTED if r.engine == "sglang" and r.tested == "real")
pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub", "sglang-stub-dp2", *REAL_RELEASES)]

PROMPT = "The capital of France is"


def client(target) -> httpx.AsyncClient:
    """SGLang's tests' HTTP calls, with the target's key."""
    return httpx.AsyncClient(base_url=target.url, headers={"Authorization": f"Bearer {target.api_key}"}, timeout=300)


async def generate(http: httpx.AsyncClient, max_new_tokens: int, rid: str | None = None, temperature: float = 0) -> dict:
    """The kits' ``/generate``: text in, ``ignore_eos``."""
    body = {"text": PROMPT, "sampling_params": {"temperature": temperature, "max_new_tokens": max_new_tokens, "ignore_eos": True}}
    if rid is not None:
        body["rid"] = rid
    response = await http.post("/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def running(http: httpx.AsyncClient, n: int, tasks: list) -> None:
    """Until *n* requests run (the kits sleep a second or two instead)."""
    for _ in range(3000):
        assert not any(t.done() for t in tasks), "setup: a request ended before the control call"
        loads = (await http.get("/v1/loads")).json()["loads"]
        if sum(rank["num_running_reqs"] for rank in loads) >= n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("setup: the requests never ran")


def finish_type(result: dict) -> str:
    return result["meta_info"]["finish_reason"]["type"]


async def test_abort_all(target):
    async with client(target) as http:
        tasks = [asyncio.create_task(generate(http, target.long_tokens)) for _ in range(8)]
        await running(http, 8, tasks)
        (await http.post("/abort_request", json={"abort_all": True})).raise_for_status()
        results = await asyncio.gather(*tasks)
        assert [finish_type(r) for r in results] == ["abort"] * 8
        assert (await http.get("/health")).status_code == 200


async def test_batch_requests_with_selective_abort(target):
    async with client(target) as http:
        rids = [f"batch_test_{i}" for i in range(3)]
        tasks = [asyncio.create_task(generate(http, target.finish_tokens, rid)) for rid in rids]
        await running(http, 3, tasks)
        abort_response = await http.post("/abort_request", json={"rid": "batch_test_1"})
        assert abort_response.status_code == 200
        results = dict(zip(rids, await asyncio.gather(*tasks)))
    assert finish_type(results["batch_test_1"]) == "abort"
    normal_completions = sum(1 for rid in ("batch_test_0", "batch_test_2") if finish_type(results[rid]) == "length")
    assert normal_completions == 2, "Other 2 requests should complete normally"


async def test_pause_resume_in_place(target):
    num_requests = 8
    async with client(target) as http:
        tasks = [asyncio.create_task(generate(http, 512, temperature=0.8)) for _ in range(num_requests)]
        await running(http, num_requests, tasks)
        paused = await http.post("/pause_generation", json={"mode": "in_place"}, timeout=30)
        paused.raise_for_status()
        done_before = sum(t.done() for t in tasks)
        assert done_before < num_requests
        await asyncio.sleep(2)
        done_after = sum(t.done() for t in tasks)
        assert done_after - done_before == 0, "nothing finishes while generation is paused in place"
        continued = await http.post("/continue_generation", json={}, timeout=30)
        continued.raise_for_status()
        bodies = await asyncio.gather(*tasks)
    for body in bodies:
        assert "text" in body
        # The fake does not detokenize: its answers' text is empty, their tokens counted.
        assert len(body["text"]) > 0 if target.real else body["meta_info"]["completion_tokens"] == 512
    assert len(bodies) == num_requests
    # SGLang's answers, which the plugin's only extend.
    assert paused.json().items() >= {"message": "Generation paused successfully.", "status": "ok"}.items()
    assert continued.json().items() >= {"message": "Generation continued successfully.", "status": "ok"}.items()


async def test_update_weight_version_is_seen_in_model_info_and_answers(target):
    async with client(target) as http:
        response = await http.post("/update_weight_version", json={"new_version": "updated_version_2.0", "abort_all_requests": False})
        assert response.status_code == 200
        data = response.json()
        assert data["success"]
        assert data["new_version"] == "updated_version_2.0"
        assert data["message"] == "Weight version updated to updated_version_2.0"
        assert (await http.get("/model_info")).json()["weight_version"] == "updated_version_2.0"
        assert (await generate(http, 4))["meta_info"]["weight_version"] == "updated_version_2.0"
        # With abort_all_requests the requests in flight end aborted, as SGLang's do.
        tasks = [asyncio.create_task(generate(http, target.long_tokens)) for _ in range(4)]
        await running(http, 4, tasks)
        response = await http.post("/update_weight_version", json={"new_version": "final_version_3.0", "abort_all_requests": True})
        assert response.status_code == 200 and response.json()["success"]
        assert [finish_type(r) for r in await asyncio.gather(*tasks)] == ["abort"] * 4
        assert (await http.get("/model_info")).json()["weight_version"] == "final_version_3.0"
        invalid = await http.post("/update_weight_version", json={})
        assert invalid.status_code == 400


async def test_v1_loads_has_a_load_per_dp_rank(target):
    expected_dp_size = 2 if target.name.endswith("dp2") else 1
    async with client(target) as http:
        response = await http.get("/v1/loads")
    assert response.status_code == 200
    answer = response.json()
    assert {"timestamp", "version", "loads"} <= answer.keys(), answer.keys()
    loads = answer["loads"]
    assert len(loads) > 0
    assert len(loads) == expected_dp_size
    assert sorted(load["dp_rank"] for load in loads) == list(range(expected_dp_size))
    for load in loads:
        assert "num_running_reqs" in load and "num_waiting_reqs" in load
