"""The operations over the contract (this package's plugin on either engine, or the stub).

Waiting for idle is event-driven on the server (``abort_requests`` with ``wait``); the client
only re-aborts when requests arrived after an abort.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from .errors import ServerError
from .loads import Load, LoadParseError, parse_loads
from .polling import Backoff, Deadline
from .results import AbortOutcome, PauseOutcome, Progress, VersionOutcome
from .transport import Transport

# The server's own wait ends this much before our deadline, so that its answer still arrives.
ANSWER_MARGIN_S = 0.25


class ContractOps:
    """Calls the contract's routes and reads their answers."""

    def __init__(self, transport: Transport) -> None:
        self.t = transport

    async def loads(self, timeout_s: float) -> Load:
        """``GET /v1/loads``, parsed."""
        data = await self.t.call("GET", "/v1/loads", timeout_s=timeout_s)
        try:
            return parse_loads(data)
        except LoadParseError as exc:
            raise ServerError(self.t.url, "protocol", f"GET /v1/loads: {exc}") from None

    async def abort(self, request_ids: Optional[list[str]], wait: bool, timeout_s: float) -> AbortOutcome:
        """``POST /abort_requests``; with *wait* the server waits (up to *timeout_s*) for release."""
        started = time.monotonic()
        body: dict[str, Any] = {"request_ids": list(request_ids) if request_ids else None, "wait": wait}
        http_timeout = timeout_s
        if wait:
            body["timeout_s"] = max(timeout_s - ANSWER_MARGIN_S, timeout_s * 0.8)
            http_timeout = timeout_s + ANSWER_MARGIN_S
        r = await self.t.call("POST", "/abort_requests", body, timeout_s=http_timeout)
        return AbortOutcome(
            aborted=r["aborted"], in_flight=r["in_flight"], idle=r["idle"], timed_out=bool(r.get("timed_out")),
            seconds=time.monotonic() - started,
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
            r = await self.t.call(
                "POST", "/abort_requests", {"wait": True, "timeout_s": wait_s}, timeout_s=remaining
            )
            aborted += r["aborted"]
            in_flight = r["in_flight"]
            if r["idle"]:
                progress(self.t.url, "idle", 0)
                return AbortOutcome(aborted, 0, True, False, rounds, time.monotonic() - started)
            # Requests arrived after the abort (or did not release in time): abort again.
            progress(self.t.url, "waiting", in_flight)
            if not r.get("timed_out"):
                await backoff.sleep(deadline)

    async def update_weight_version(self, new_version: str, abort_all: bool, timeout_s: float) -> VersionOutcome:
        """``POST /update_weight_version`` with ``abort_all_requests`` always explicit."""
        r = await self.t.call(
            "POST", "/update_weight_version", {"new_version": new_version, "abort_all_requests": abort_all}, timeout_s=timeout_s
        )
        return VersionOutcome(r["new_version"], r.get("previous_version"), r.get("aborted"))

    async def pause(self, mode: str, timeout_s: float) -> PauseOutcome:
        """``POST /pause`` in *mode* (``abort`` or ``keep``)."""
        return _pause_state(await self.t.call("POST", "/pause", {"mode": mode}, timeout_s=timeout_s))

    async def resume(self, timeout_s: float) -> PauseOutcome:
        """``POST /resume``."""
        return _pause_state(await self.t.call("POST", "/resume", timeout_s=timeout_s))

    async def is_paused(self, timeout_s: float) -> PauseOutcome:
        """``GET /is_paused``."""
        return _pause_state(await self.t.call("GET", "/is_paused", timeout_s=timeout_s))

    async def partial_generate(self, body: dict, timeout_s: Optional[float]) -> dict:
        """``POST /partial_generate``; the answer as the contract defines it."""
        r = await self.t.call("POST", "/partial_generate", body, timeout_s=timeout_s)
        if not isinstance(r, dict) or "output_ids" not in r:
            raise ServerError(self.t.url, "protocol", f"POST /partial_generate: unexpected answer {str(r)[:120]}")
        return r


def _pause_state(r: dict) -> PauseOutcome:
    return PauseOutcome(bool(r["is_paused"]), r.get("mode"))
