"""A thin test client for the contract, plus waiting helpers that poll with a deadline.

Every answer of a contract route is read with the contract's own response models
(:mod:`engine_plugins.contract.schema`): an answer that does not fit fails the test. The helpers hand the
tests the answer's JSON as sent, so that they can compare it exactly.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
import time
from typing import Any, Optional

import httpx
from pydantic import BaseModel

from engine_plugins.contract.schema import (
    CONTRACT_HEADER,
    AbortResult,
    LoadsResult,
    PartialGenerateResult,
    PauseState,
    UpdateWeightVersionResult,
)
from targets import Target

# The answer model of each contract route.
ANSWERS: dict[tuple[str, str], type[BaseModel]] = {
    ("POST", "/abort_requests"): AbortResult,
    ("GET", "/v1/loads"): LoadsResult,
    ("POST", "/update_weight_version"): UpdateWeightVersionResult,
    ("POST", "/partial_generate"): PartialGenerateResult,
    ("POST", "/pause"): PauseState,
    ("POST", "/resume"): PauseState,
    ("GET", "/is_paused"): PauseState,
}

# Real engines on two cores can stall a client for seconds: generous deadlines, never sleeps.
DEADLINE_S = 60.0


def contract_headers(target: Target) -> dict[str, str]:
    """What a contract client sends: the target's key and the contract's header (the contract's
    answers, where an engine's own route of the same path would answer its own)."""
    return {"Authorization": f"Bearer {target.api_key}", CONTRACT_HEADER: "1"}


class Api:
    """Calls the contract routes of one target with its API key."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.http = httpx.AsyncClient(
            base_url=target.url,
            headers=contract_headers(target),
            timeout=httpx.Timeout(300.0, connect=30.0),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=256, keepalive_expiry=2.0),
        )

    async def __aenter__(self) -> "Api":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.http.aclose()

    async def post(self, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        """POST *body* as JSON (no body at all when None); the raw response."""
        return await self.http.post(path, json=body, **kwargs) if body is not None else await self.http.post(path, **kwargs)

    async def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict:
        """Call a route and return its JSON, failing the test on any status but 200 and, for a
        contract route, on an answer its model does not accept."""
        response = await (self.post(path, body, **kwargs) if method == "POST" else self.http.get(path, **kwargs))
        assert response.status_code == 200, f"{method} {path} -> {response.status_code} {response.text}"
        data = response.json()
        model = ANSWERS.get((method, path))
        if model is not None:
            model.model_validate(data)
        return data

    async def loads(self) -> dict:
        """``GET /v1/loads``."""
        return await self.ok("GET", "/v1/loads")

    async def generate(self, max_new_tokens: int, request_id: Optional[str] = None, **sampling: Any) -> dict:
        """One ``/partial_generate`` to the end (``ignore_eos``), with *sampling* added."""
        body: dict[str, Any] = {
            "input_ids": [1, 15, 27, 33, 41],
            "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True, **sampling},
        }
        if request_id is not None:
            body["request_id"] = request_id
        return await self.ok("POST", "/partial_generate", body)

    def start(self, n: int, max_new_tokens: int, prefix: str = "r") -> list[asyncio.Task]:
        """Start *n* generations in the background, ids ``{prefix}-{i}``."""
        return [asyncio.create_task(self.generate(max_new_tokens, request_id=f"{prefix}-{i}")) for i in range(n)]

    async def warm(self, n: int) -> None:
        """Open *n* connections first, so that a burst of requests arrives at once."""
        await asyncio.gather(*(self.http.get("/is_paused") for _ in range(n)))

    async def wait_for(self, what: str, predicate, deadline_s: float = DEADLINE_S) -> dict:
        """Poll /v1/loads until *predicate(loads)* holds; a setup failure if it never does."""
        end = time.monotonic() + deadline_s
        loads = await self.loads()
        while not predicate(loads):
            if time.monotonic() > end:
                raise AssertionError(f"setup: {what} did not happen within {deadline_s} s; last loads: {loads}")
            await asyncio.sleep(0.02)
            loads = await self.loads()
        return loads

    async def wait_in_flight(self, n: int, running: bool = False) -> dict:
        """Wait until *n* requests are in flight (and all of them running, if asked)."""

        def arrived(loads: dict) -> bool:
            answer = LoadsResult.model_validate(loads)
            return answer.in_flight >= n and (not running or answer.aggregate.total_running_reqs >= n)

        return await self.wait_for(f"{n} requests {'running' if running else 'in flight'}", arrived)


def native_body(max_new_tokens: int, rid: str, stream: bool = False) -> dict:
    """A native SGLang /generate request, as RL frameworks send it (token ids, ignore_eos)."""
    return {
        "rid": rid,
        "input_ids": [1, 15, 27, 33, 41],
        "stream": stream,
        "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True},
    }


def engine_of(target: Target) -> Optional[str]:
    """``sglang`` or ``vllm`` for an engine's target (real or fake), None for the stub."""
    return next((e for e in ("sglang", "vllm") if target.name.startswith(e)), None)


# The contract's paths that vLLM serves too: there an error's type is vLLM's (its status phrase).
VLLM_OWN_PATHS = ("/pause", "/resume", "/is_paused", "/abort_requests", "/update_weight_version")


def error_type(target: Target, path: str, status: int = 400, contract_type: str = "invalid_request") -> str:
    """The ``type`` of *target*'s error answer on *path*: the contract's word, or vLLM's on a path
    vLLM serves too (docs/contract.md, "Errors")."""
    if engine_of(target) == "vllm" and target.engine_app and path.split("?")[0] in VLLM_OWN_PATHS:
        return HTTPStatus(status).phrase
    return contract_type


def total_reqs(loads: dict) -> int:
    """What RL frameworks read to decide idleness: the sum of num_total_reqs over ranks."""
    return sum(rank.num_total_reqs for rank in LoadsResult.model_validate(loads).loads)


def assert_partial(result: dict, max_new_tokens: int) -> None:
    """A well-formed result: one logprob per token (the model checks it), spans covering exactly
    the output."""
    answer = PartialGenerateResult.model_validate(result)
    assert all(isinstance(lp, float) and lp <= 1e-4 for lp in result["output_logprobs"]), "logprobs are JSON floats <= 0"
    assert len(answer.output_ids) <= max_new_tokens
    assert answer.cancelled == (answer.finish_reason == "abort")
    spans = answer.weight_versions
    if answer.output_ids:
        assert spans[0].start == 0 and spans[-1].end == len(answer.output_ids)
        for a, b in zip(spans, spans[1:]):
            assert a.end == b.start and a.version != b.version
    else:
        assert spans == []
