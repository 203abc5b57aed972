"""The operations over the contract (this package's plugin on either engine, or the stub).

Every answer is read with the contract's own response models (:mod:`engine_plugins.contract.schema`);
one that does not fit is a ``protocol`` failure naming the field. Waiting for idle is
event-driven on the server (``abort_requests`` with ``wait``); the client only re-aborts when
requests arrived after an abort.
"""

from __future__ import annotations

import time
from typing import Any, Optional, TypeVar

from pydantic import BaseModel, ValidationError

from engine_plugins.contract.schema import (
    AbortResult,
    LoadsResult,
    PartialGenerateResult,
    PauseState,
    UpdateWeightVersionResult,
    WeightSwapResult,
)
from engine_plugins.client.errors import ServerError, answer_problems
from engine_plugins.client.loads import Load, load_from_contract
from engine_plugins.client.polling import Backoff, Deadline
from engine_plugins.client.results import AbortOutcome, PauseOutcome, Progress, StaleSelector, VersionOutcome
from engine_plugins.client.transport import Transport

Answer = TypeVar("Answer", bound=BaseModel)

# The server's own wait ends this much before our deadline, so that its answer still arrives.
ANSWER_MARGIN_S = 0.25


class ContractOps:
    """Calls the contract's routes and reads their answers."""

    def __init__(self, transport: Transport) -> None:
        self.t = transport

    async def _call(self, model: type[Answer], method: str, path: str, body: Any = None, **kwargs: Any) -> Answer:
        """Call a contract route and read its answer as *model*."""
        data = await self.t.call(method, path, body, **kwargs)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise ServerError(self.t.url, "protocol", f"{method} {path}: not the contract's answer ({answer_problems(exc)})") from None

    async def loads(self, timeout_s: float) -> Load:
        """``GET /v1/loads``."""
        return load_from_contract(await self._call(LoadsResult, "GET", "/v1/loads", timeout_s=timeout_s))

    async def abort(self, request_ids: Optional[list[str]], wait: bool, timeout_s: float) -> AbortOutcome:
        """``POST /abort_requests``; with *wait* the server waits (up to *timeout_s*) for release."""
        return await self._abort({"request_ids": list(request_ids) if request_ids else None}, wait, timeout_s)

    async def abort_stale(self, selector: StaleSelector, wait: bool, timeout_s: float) -> AbortOutcome:
        """``POST /abort_requests`` with ``admitted_before`` or ``max_staleness``: the server selects
        the requests by the version they were admitted under."""
        return await self._abort(selector.body(), wait, timeout_s)

    async def _abort(self, selection: dict[str, Any], wait: bool, timeout_s: float) -> AbortOutcome:
        started = time.monotonic()
        body: dict[str, Any] = {**selection, "wait": wait}
        http_timeout = timeout_s
        if wait:
            body["timeout_s"] = max(timeout_s - ANSWER_MARGIN_S, timeout_s * 0.8)
            http_timeout = timeout_s + ANSWER_MARGIN_S
        r = await self._call(AbortResult, "POST", "/abort_requests", body, timeout_s=http_timeout)
        return AbortOutcome(
            aborted=r.aborted, in_flight=r.in_flight, idle=r.idle, timed_out=r.timed_out, seconds=time.monotonic() - started
        )

    async def drain(self, deadline: Deadline, progress: Progress) -> AbortOutcome:
        """Abort everything and wait until the server holds nothing, or until *deadline*."""
        started = time.monotonic()
        aborted, rounds, in_flight = 0, 0, None
        backoff = Backoff()
        while True:
            remaining = deadline.remaining()
            if remaining <= ANSWER_MARGIN_S * 0.2:
                progress(self.t.url, "timeout", in_flight)
                return AbortOutcome(aborted, in_flight, False, True, rounds, time.monotonic() - started,
                                    "requests still in flight at the deadline")
            rounds += 1
            progress(self.t.url, "aborting", in_flight)
            wait_s = max(remaining - ANSWER_MARGIN_S, remaining * 0.8)
            r = await self._call(AbortResult, "POST", "/abort_requests", {"wait": True, "timeout_s": wait_s}, timeout_s=remaining)
            aborted += r.aborted
            in_flight = r.in_flight
            if r.idle:
                progress(self.t.url, "idle", 0)
                return AbortOutcome(aborted, 0, True, False, rounds, time.monotonic() - started)
            # Requests arrived after the abort (or did not release in time): abort again.
            progress(self.t.url, "waiting", in_flight)
            if not r.timed_out:
                await backoff.sleep(deadline)

    async def update_weight_version(self, new_version: str, abort_all: bool, timeout_s: float) -> VersionOutcome:
        """``POST /update_weight_version`` with ``abort_all_requests`` always explicit."""
        r = await self._call(
            UpdateWeightVersionResult,
            "POST", "/update_weight_version", {"new_version": new_version, "abort_all_requests": abort_all}, timeout_s=timeout_s,
        )
        return VersionOutcome(r.new_version, r.previous_version, r.aborted)

    async def pause(self, mode: str, timeout_s: float, clear_cache: Optional[bool] = None) -> PauseOutcome:
        """``POST /pause`` in *mode* (``abort`` or ``keep``), with *clear_cache* when it is given."""
        body = {"mode": mode} if clear_cache is None else {"mode": mode, "clear_cache": clear_cache}
        return _pause_outcome(await self._call(PauseState, "POST", "/pause", body, timeout_s=timeout_s))

    async def resume(self, timeout_s: float) -> PauseOutcome:
        """``POST /resume``."""
        return _pause_outcome(await self._call(PauseState, "POST", "/resume", timeout_s=timeout_s))

    async def is_paused(self, timeout_s: float) -> PauseOutcome:
        """``GET /is_paused``."""
        return _pause_outcome(await self._call(PauseState, "GET", "/is_paused", timeout_s=timeout_s))

    async def begin_weight_swap(self, version: str, mode: str, clear_cache: Optional[bool], lease_s: float,
                                timeout_s: float) -> WeightSwapResult:
        """``POST /weight_swap/begin``."""
        body = {"version": version, "mode": mode, "lease_s": lease_s}
        if clear_cache is not None:
            body["clear_cache"] = clear_cache
        # Never sent twice: a begin that did open the swap would answer its retry with a 409.
        return await self._call(WeightSwapResult, "POST", "/weight_swap/begin", body, timeout_s=timeout_s, idempotent=False)

    async def commit_weight_swap(self, version: str, timeout_s: float) -> WeightSwapResult:
        """``POST /weight_swap/commit`` of the open swap to *version* (never sent twice: a second
        one is a 404 once the first has committed)."""
        return await self._call(WeightSwapResult, "POST", "/weight_swap/commit", {"version": version}, timeout_s=timeout_s,
                                idempotent=False)

    async def partial_generate(self, body: dict, timeout_s: Optional[float]) -> PartialGenerateResult:
        """``POST /partial_generate``; the answer as the contract defines it."""
        # Never sent twice: a generation the server did start would run twice.
        return await self._call(PartialGenerateResult, "POST", "/partial_generate", body, timeout_s=timeout_s, idempotent=False)


def _pause_outcome(state: PauseState) -> PauseOutcome:
    return PauseOutcome(state.is_paused, state.mode)
