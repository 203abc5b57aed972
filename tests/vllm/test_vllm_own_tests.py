"""vLLM's own tests of the RL routes the plugin replaces, held against the plugin: the same calls
and assertions, written here, on a server with the plugin (drop-in means vLLM's own tests pass).

From vllm-project/vllm, the versions matching 0.32 (docs/engine-notes.md, "vLLM's own route
tests", lists them and what is left out: sleep mode, GPUs, MoE):
- ``tests/entrypoints/rl/state_transitions/test_pause_resume.py``: idempotent pause and resume in
  every mode, an invalid mode, each mode's effect on a request in flight and on a new one;
- ``tests/entrypoints/serve/dev/rlhf/info_retrieval/test_weight_info.py``: ``/weight_info`` and
  ``/update_weight_version`` (exact answers, invalid payloads keep the version);
- ``tests/entrypoints/rl/return_routed_experts/test_route_request_bodies.py``: a body that is not
  an object is a 400 that reaches no engine.

The calls are vLLM's tests' own: no ``X-Engine-Plugins-Contract`` header, query parameters for
``/pause``, the server's key (vLLM's tests start servers without one) the only addition.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from engine_versions import SUPPORTED

REAL_RELEASES = tuple(str(r) for r in SUPPORTED if r.engine == "vllm" and r.tested == "real")
pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm", "vllm-stub", "vllm-0.26-stub", *REAL_RELEASES)]

MODES = ("abort", "wait", "keep")


def client(target) -> httpx.AsyncClient:
    """vLLM's tests' HTTP calls, with the target's key."""
    return httpx.AsyncClient(base_url=target.url, headers={"Authorization": f"Bearer {target.api_key}"}, timeout=120)


async def pause(http: httpx.AsyncClient, mode: str = "abort", clear_cache: bool = True) -> int:
    """vLLM's helper: ``POST /pause`` with the mode and clear_cache as query parameters."""
    return (await http.post("/pause", params={"mode": mode, "clear_cache": str(clear_cache)})).status_code


async def resume(http: httpx.AsyncClient) -> int:
    return (await http.post("/resume")).status_code


async def is_paused(http: httpx.AsyncClient) -> bool:
    return (await http.get("/is_paused")).json()["is_paused"]


@pytest.fixture
async def resumed(target):
    """vLLM's autouse fixture: every test starts and ends resumed."""
    async with client(target) as http:
        assert await resume(http) == 200
        yield http
        assert await resume(http) == 200


# --- test_pause_resume.py -----------------------------------------------------------------------


async def test_state_and_idempotency_across_cycles(resumed):
    http = resumed
    assert not await is_paused(http)
    assert await resume(http) == 200
    assert await resume(http) == 200
    assert not await is_paused(http)
    for _ in range(2):
        for mode in MODES:
            assert await pause(http, mode=mode) == 200
            assert await pause(http, mode=mode) == 200
            assert await is_paused(http)
            assert await resume(http) == 200
            assert await resume(http) == 200
            assert not await is_paused(http)


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
async def test_invalid_mode_preserves_state(resumed, paused):
    http = resumed
    if paused:
        assert await pause(http, mode="keep") == 200
    response = await http.post("/pause", params={"mode": "invalid"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "query.mode"
    assert await is_paused(http) is paused


async def _model(http: httpx.AsyncClient) -> str:
    return (await http.get("/v1/models")).json()["data"][0]["id"]


async def _stream(http: httpx.AsyncClient, model: str, chunks: list, max_tokens: int) -> str:
    """vLLM's in-flight request: a streamed completion; returns its finish reason."""
    body = {"model": model, "prompt": "hello", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    finish = None
    async with http.stream("POST", "/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[len("data: "):])["choices"][0]
            chunks.append(choice.get("text"))
            finish = choice.get("finish_reason") or finish
    return finish


async def _gen(http: httpx.AsyncClient, model: str) -> dict:
    response = await http.post("/v1/completions", json={"model": model, "prompt": "hi", "max_tokens": 8, "temperature": 0})
    response.raise_for_status()
    return response.json()


def _ok(result: dict) -> bool:
    return bool(result.get("choices")) and "error" not in result


@pytest.mark.parametrize("mode", MODES)
async def test_mode_request_lifecycle(resumed, target, mode):
    http = resumed
    model = await _model(http)
    chunks: list = []
    inflight = asyncio.create_task(_stream(http, model, chunks, 256))
    while len(chunks) < 2:
        assert not inflight.done(), "setup: the streamed request ended before the pause"
        await asyncio.sleep(0.02)
    assert await pause(http, mode=mode) == 200
    assert await is_paused(http)
    if mode in ("abort", "wait"):
        await asyncio.sleep(0.5)  # the last chunk's delivery
        assert inflight.done()
    else:
        chunks_after_pause = len(chunks)
        await asyncio.sleep(3)
        assert not inflight.done()
        assert len(chunks) == chunks_after_pause
    new = asyncio.create_task(_gen(http, model))
    await asyncio.sleep(0.3)
    assert not new.done(), "new request completed while generation was paused"
    assert await resume(http) == 200
    finish = await inflight
    assert finish == {"abort": "abort", "wait": "length", "keep": "length"}[mode]
    assert _ok(await new)


# --- test_weight_info.py --------------------------------------------------------------------------


async def _update(http: httpx.AsyncClient, version) -> httpx.Response:
    return await http.post("/update_weight_version", json={"new_version": version})


async def _weight_info(http: httpx.AsyncClient) -> dict:
    response = await http.get("/weight_info")
    assert response.status_code == 200
    return response.json()


async def test_weight_info_initial_schema_and_update_is_visible(resumed):
    http = resumed
    (await _update(http, "default")).raise_for_status()
    assert await _weight_info(http) == {"weight_version": "default"}
    response = await _update(http, "step-42")
    assert response.status_code == 200
    assert response.json() == {"success": True, "new_version": "step-42"}
    assert await _weight_info(http) == {"weight_version": "step-42"}
    for version in ("step-1", "checkpoint/final"):
        response = await _update(http, version)
        assert response.status_code == 200
        assert response.json() == {"success": True, "new_version": version}
    assert await _weight_info(http) == {"weight_version": "checkpoint/final"}


# The fakes' tokens are random even at temperature 0: real servers only.
@pytest.mark.targets("vllm", *REAL_RELEASES)
async def test_weight_version_does_not_affect_generation(resumed):
    http = resumed
    model = await _model(http)
    body = {"model": model, "prompt": "The weight version", "max_tokens": 8, "temperature": 0}
    before = (await http.post("/v1/completions", json=body)).json()
    (await _update(http, "generation-check")).raise_for_status()
    assert await _weight_info(http) == {"weight_version": "generation-check"}
    after = (await http.post("/v1/completions", json=body)).json()
    assert after["choices"][0]["text"] == before["choices"][0]["text"]


@pytest.mark.parametrize("payload", [{}, {"weight_version": "wrong-field"}, {"new_version": ["not", "a", "string"]}],
                         ids=["empty", "wrong-field", "not-a-string"])
async def test_invalid_update_preserves_state(resumed, payload):
    http = resumed
    (await _update(http, "stable")).raise_for_status()
    response = await http.post("/update_weight_version", json=payload)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "body.new_version"
    assert await _weight_info(http) == {"weight_version": "stable"}


# --- test_route_request_bodies.py -------------------------------------------------------------------


@pytest.mark.parametrize("body", ["[]", "1", '"x"', "null"])
async def test_non_object_body_to_abort_requests_is_rejected(resumed, body):
    http = resumed
    response = await http.post("/abort_requests", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "Bad Request" and error["code"] == 400, error


async def test_valid_abort_body_is_vllms_answer(resumed):
    response = await resumed.post("/abort_requests", json={"request_ids": ["a"]})
    assert response.status_code == 200
    answer = response.json()
    assert answer["status"] == "aborted" and answer["aborted"] == 0, answer  # no request "a" here
