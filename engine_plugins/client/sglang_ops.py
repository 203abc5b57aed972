"""The operations over SGLang's own routes, for a server without the plugin.

Wire shapes (SGLang 0.5.23; ``docs/engine-notes.md``): ``POST /abort_request`` takes
``{"rid": str, "abort_all": bool}`` and answers a bare 200 with no count; ``GET /v1/loads`` is a
per-rank snapshot (older versions: ``GET /get_load``); ``POST /update_weight_version`` takes
``{"new_version", "abort_all_requests"}`` whose default ``true`` aborts everything, so the client
always sends it; ``POST /pause_generation {"mode"}`` and ``POST /continue_generation {}``.
SGLang has no way to wait for an abort, so the client polls the loads with backoff, re-aborting
each round (an abort can miss requests SGLang had not yet dispatched), up to a deadline.
"""

from __future__ import annotations

import time
from typing import Optional

from engine_plugins.contract.schema import PartialGenerateResult
from engine_plugins.client.errors import ServerError
from engine_plugins.client.loads import Load, LoadParseError, parse_loads
from engine_plugins.client.polling import Backoff, Deadline
from engine_plugins.client.results import (
    AbortOutcome,
    PauseOutcome,
    Progress,
    StaleSelector,
    VersionOutcome,
    stale_unsupported,
)
from engine_plugins.client.transport import Transport

# The contract's modes in SGLang's words: keep retracts running requests (their KV is recomputed
# on resume), or, with clear_cache false, freezes them in place.
PAUSE_MODES = {"abort": "abort", "keep": "retract"}
KEEP_KV = "in_place"
NO_COUNT = "SGLang's /abort_request does not say how many requests it aborted"


class SGLangOps:
    """Calls SGLang's native routes and reads their answers."""

    def __init__(self, transport: Transport, legacy_loads: bool = False) -> None:
        self.t = transport
        self.legacy_loads = legacy_loads

    async def loads(self, timeout_s: float) -> Load:
        """``GET /v1/loads?include=core`` (or ``/get_load`` on older SGLang), parsed."""
        if self.legacy_loads:
            path, params = "/get_load", None
        else:
            path, params = "/v1/loads", {"include": "core"}
        data = await self.t.call("GET", path, params=params, timeout_s=timeout_s)
        try:
            return parse_loads(data)
        except LoadParseError as exc:
            raise ServerError(self.t.url, "protocol", f"GET {path}: {exc}") from None

    async def _abort_once(self, request_ids: Optional[list[str]], timeout_s: float) -> None:
        if not request_ids:
            await self.t.call("POST", "/abort_request", {"abort_all": True}, timeout_s=timeout_s)
            return
        for rid in request_ids:
            await self.t.call("POST", "/abort_request", {"rid": rid}, timeout_s=timeout_s)

    async def abort(self, request_ids: Optional[list[str]], wait: bool, timeout_s: float) -> AbortOutcome:
        """Abort all (or each id); with *wait* and no ids, poll the loads until idle or *timeout_s*."""
        if wait and not request_ids:
            return await self.drain(Deadline.after(timeout_s), lambda *a: None)
        started = time.monotonic()
        await self._abort_once(request_ids, timeout_s)
        note = NO_COUNT
        if request_ids:
            # SGLang's scheduler matches rids by prefix (docs/engine-notes.md).
            note += "; SGLang also aborts every request whose id starts with one of these ids"
            if wait:
                note += "; it cannot say when given ids are released, so this did not wait"
        return AbortOutcome(None, None, None, False, 1, time.monotonic() - started, note)

    async def abort_stale(self, selector: StaleSelector, wait: bool, timeout_s: float) -> AbortOutcome:
        """Not offered natively: refused without sending anything, never widened to an abort-all."""
        raise ServerError(self.t.url, "unsupported", stale_unsupported(selector, "SGLang", "/abort_request"))

    async def drain(self, deadline: Deadline, progress: Progress) -> AbortOutcome:
        """Abort all, then poll the loads with backoff (re-aborting each round) until idle or *deadline*."""
        started = time.monotonic()
        rounds, total = 0, None
        backoff = Backoff()
        while True:
            if deadline.remaining() <= 0.05:
                progress(self.t.url, "timeout", total)
                return AbortOutcome(None, total, False, True, rounds, time.monotonic() - started,
                                    f"SGLang still reported {total} requests at the deadline")
            rounds += 1
            progress(self.t.url, "aborting", total)
            await self._abort_once(None, deadline.remaining())
            total = (await self.loads(deadline.remaining())).total
            if total == 0:
                progress(self.t.url, "idle", 0)
                return AbortOutcome(None, 0, True, False, rounds, time.monotonic() - started,
                                    NO_COUNT + "; idle read from its loads (requests held before the scheduler are not counted there)")
            progress(self.t.url, "waiting", total)
            await backoff.sleep(deadline)

    async def update_weight_version(self, new_version: str, abort_all: bool, timeout_s: float) -> VersionOutcome:
        """``POST /update_weight_version`` with ``abort_all_requests`` explicit (SGLang's default aborts all)."""
        r = await self.t.call(
            "POST", "/update_weight_version", {"new_version": new_version, "abort_all_requests": abort_all}, timeout_s=timeout_s
        )
        if isinstance(r, dict) and r.get("success") is False:
            raise ServerError(self.t.url, "http", f"POST /update_weight_version: {r.get('message')}")
        note = NO_COUNT if abort_all else ""
        return VersionOutcome(new_version, None, None if abort_all else 0, note)

    async def pause(self, mode: str, timeout_s: float, clear_cache: Optional[bool] = None) -> PauseOutcome:
        """``POST /pause_generation`` (keep = SGLang's ``retract``, or ``in_place`` when
        *clear_cache* is false; acknowledged without waiting)."""
        sglang_mode = KEEP_KV if mode == "keep" and clear_cache is False else PAUSE_MODES[mode]
        await self.t.call("POST", "/pause_generation", {"mode": sglang_mode}, timeout_s=timeout_s)
        return PauseOutcome(True, mode, f"SGLang mode {sglang_mode!r}")

    async def resume(self, timeout_s: float) -> PauseOutcome:
        """``POST /continue_generation``."""
        await self.t.call("POST", "/continue_generation", {}, timeout_s=timeout_s)
        return PauseOutcome(False, None)

    async def is_paused(self, timeout_s: float) -> PauseOutcome:
        """SGLang has no /is_paused: unknown."""
        return PauseOutcome(None, None, "SGLang without the plugin has no /is_paused")

    async def partial_generate(self, body: dict, timeout_s: Optional[float]) -> PartialGenerateResult:
        """Not offered natively."""
        raise ServerError(self.t.url, "unsupported", "partial generation needs the engine-plugins plugin on SGLang (pip install engine-plugins beside SGLang)")
