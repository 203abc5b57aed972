"""Partial rollouts: a generation that survives cancels.

Each attempt's tokens, logprobs and per-token weight versions are kept; after a cancel the
helper waits (bounded) for the server to resume, then continues from the prompt plus the tokens
so far with the remaining ``max_new_tokens``, on the same server or the next one, up to a limit
on resubmits.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from engine_plugins.contract.schema import PartialGenerateResult
from engine_plugins.client.errors import ServerError
from engine_plugins.client.server import ServerClient


@dataclass
class Attempt:
    """One submission: where, how many tokens it added, and whether it was cancelled."""

    server: str
    request_id: str
    new_tokens: int
    cancelled: bool
    finish_reason: Optional[str]
    error: Optional[str] = None


@dataclass
class Rollout:
    """One sample's generation across attempts."""

    prompt_ids: list[int]
    max_new_tokens: int
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    token_versions: list[str] = field(default_factory=list)
    """The weight version of each output token."""
    finish_reason: Optional[str] = None
    """``stop`` or ``length`` when done; ``abort`` when it gave up (``gave_up`` says why)."""
    gave_up: Optional[str] = None
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """Finished (stop or length) or given up."""
        return self.finish_reason is not None

    @property
    def remaining(self) -> int:
        """New tokens still allowed."""
        return self.max_new_tokens - len(self.output_ids)

    @property
    def cancels(self) -> int:
        """How many attempts were cancelled."""
        return sum(1 for a in self.attempts if a.cancelled)

    def version_spans(self) -> list[dict]:
        """``[{"version", "start", "end"}]`` over the output, as the contract reports them."""
        spans: list[dict] = []
        for i, version in enumerate(self.token_versions):
            if spans and spans[-1]["version"] == version:
                spans[-1]["end"] = i + 1
            else:
                spans.append({"version": version, "start": i, "end": i + 1})
        return spans

    def tokens_per_version(self) -> dict[str, int]:
        """How many output tokens each weight version generated."""
        counts: dict[str, int] = {}
        for version in self.token_versions:
            counts[version] = counts.get(version, 0) + 1
        return counts

    def absorb(self, result: PartialGenerateResult) -> int:
        """Append one ``/partial_generate`` answer's tokens, logprobs and versions; returns how many."""
        ids, logprobs = list(result.output_ids), list(result.output_logprobs)
        versions = ["unknown"] * len(ids)
        for span in result.weight_versions:
            for i in range(max(span.start, 0), min(span.end, len(ids))):
                versions[i] = span.version
        self.output_ids += ids
        self.output_logprobs += logprobs
        self.token_versions += versions
        return len(ids)

    def to_dict(self) -> dict:
        """Plain JSON-ready fields."""
        return {
            "prompt_len": len(self.prompt_ids), "output_len": len(self.output_ids), "finish_reason": self.finish_reason,
            "gave_up": self.gave_up, "weight_versions": self.version_spans(), "attempts": len(self.attempts), "cancels": self.cancels,
        }


def tokens_per_version(rollouts: Sequence[Rollout]) -> dict[str, int]:
    """How many output tokens each weight version generated, over *rollouts*."""
    totals: dict[str, int] = {}
    for rollout in rollouts:
        for version, n in rollout.tokens_per_version().items():
            totals[version] = totals.get(version, 0) + n
    return totals


async def run_rollout(
    rollout: Rollout,
    servers: Sequence[ServerClient],
    sampling_params: Optional[dict] = None,
    max_resubmits: int = 8,
    resume_timeout_s: float = 300.0,
    request_id: Optional[str] = None,
    resume_signal: Optional[asyncio.Event] = None,
    on_attempt: Optional[Callable[[Rollout, Attempt], None]] = None,
) -> Rollout:
    """Generate *rollout* to the end, surviving cancels; returns it (also updated in place).

    Starts on ``servers[0]``. After a cancelled attempt it waits until that server is resumed
    (*resume_signal*, or ``/is_paused`` polled with backoff, at most *resume_timeout_s*) and
    continues there; if the server fails or stays paused, it moves to the next server. After
    *max_resubmits* resubmissions it gives up with what it has (``finish_reason`` ``abort``).
    """
    if not servers:
        raise ValueError("run_rollout needs at least one server")
    base_id = request_id or uuid.uuid4().hex
    params = dict(sampling_params or {})
    index = 0
    while not rollout.done:
        if rollout.remaining <= 0:
            rollout.finish_reason = "length"
            break
        if len(rollout.attempts) > max_resubmits:
            rollout.finish_reason, rollout.gave_up = "abort", f"still unfinished after {max_resubmits} resubmits"
            break
        server = servers[index % len(servers)]
        rid = f"{base_id}-{len(rollout.attempts)}"
        attempt = await _attempt(rollout, server, params, rid)
        rollout.attempts.append(attempt)
        if on_attempt is not None:
            on_attempt(rollout, attempt)
        if attempt.error is not None:
            index += 1  # the server failed: carry on elsewhere
            continue
        if not attempt.cancelled:
            rollout.finish_reason = attempt.finish_reason or "length"
            break
        if not await _resumed(server, resume_timeout_s, resume_signal):
            index += 1
    return rollout


async def _attempt(rollout: Rollout, server: ServerClient, params: dict, rid: str) -> Attempt:
    body_params = {**params, "max_new_tokens": rollout.remaining}
    try:
        result = await server.partial_generate(rollout.prompt_ids + rollout.output_ids, body_params, rid)
    except ServerError as exc:
        return Attempt(server.url, rid, 0, True, None, exc.message)
    added = rollout.absorb(result)
    return Attempt(server.url, rid, added, result.cancelled, result.finish_reason)


async def _resumed(server: ServerClient, timeout_s: float, signal: Optional[asyncio.Event]) -> bool:
    try:
        return await server.wait_resumed(timeout_s, signal)
    except ServerError:
        return False
