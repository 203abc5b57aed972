"""What the framework tests share: an HTTP client that calls an engine's own routes the way the
frameworks do (only the target's API key added), and the engines' native generation routes,
started in the background so that control calls meet requests in flight."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Optional

import httpx

from targets import Target

PROMPT_IDS = [1, 15, 27, 33, 41]


def client(target: Target) -> httpx.AsyncClient:
    """An HTTP client for *target*; the frameworks send no key, the test targets require one."""
    return httpx.AsyncClient(
        base_url=target.url,
        headers={"Authorization": f"Bearer {target.api_key}"},
        timeout=httpx.Timeout(300.0, connect=30.0),
        limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
    )


def sglang_generate(http: httpx.AsyncClient, max_new_tokens: int, rid: Optional[str] = None, **extra: Any) -> asyncio.Task:
    """SGLang's own ``POST /generate`` for token ids with ``return_logprob`` (slime's, AReaL's and
    verl's payload), in the background; the task returns the JSON answer."""
    payload: dict[str, Any] = {
        "input_ids": list(PROMPT_IDS),
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 1.0, "ignore_eos": True},
        "return_logprob": True,
        **extra,
    }
    if rid is not None:
        payload["rid"] = rid

    async def run() -> dict:
        response = await http.post("/generate", json=payload)
        assert response.status_code == 200, f"/generate -> {response.status_code} {response.text}"
        return response.json()

    return asyncio.create_task(run())


def vllm_complete(http: httpx.AsyncClient, model: str, max_tokens: int) -> asyncio.Task:
    """vLLM's own ``POST /v1/completions`` for token ids, in the background."""

    async def run() -> dict:
        body = {"model": model, "prompt": list(PROMPT_IDS), "max_tokens": max_tokens, "ignore_eos": True}
        response = await http.post("/v1/completions", json=body)
        assert response.status_code == 200, f"/v1/completions -> {response.status_code} {response.text}"
        return response.json()

    return asyncio.create_task(run())


async def served_model(http: httpx.AsyncClient) -> str:
    """The model name vLLM serves (``GET /v1/models``)."""
    response = await http.get("/v1/models")
    assert response.status_code == 200, response.text
    return response.json()["data"][0]["id"]


def adapter_rid(adapter: str) -> str:
    """A request id as miles builds it for a LoRA adapter (``miles/utils/multi_lora.py:184``)."""
    return f"{adapter}::{uuid.uuid4().hex}"
