"""The operations over vLLM's native RL routes (``VLLM_SERVER_DEV_MODE=1``), without the plugin.

Wire shapes (vLLM 0.32; ``docs/engine-notes.md``): ``POST /abort_requests
{"request_ids": [...]}`` (``{}`` aborts all; the answer's ``aborted`` is the number of ids
*requested*); ``POST /pause?mode=abort|wait|keep`` answers once the engine core has paused (in
abort mode, after it has sent every abort output);
``POST /resume``; ``GET /is_paused`` -> ``{"is_paused"}``; ``POST /update_weight_version
{"new_version"}``, which never aborts; ``GET /weight_info``. vLLM has no load endpoint with
running/waiting counts: the Prometheus gauges on ``GET /metrics`` are shown, and idleness comes
from the pause, not from them (they refresh only after engine steps).
"""

from __future__ import annotations

import time
from typing import Optional

from engine_plugins.contract.schema import PartialGenerateResult
from engine_plugins.client.errors import ServerError
from engine_plugins.client.loads import Load, LoadParseError, parse_vllm_metrics
from engine_plugins.client.polling import Deadline
from engine_plugins.client.results import (
    AbortOutcome,
    PauseOutcome,
    Progress,
    StaleSelector,
    VersionOutcome,
    stale_unsupported,
)
from engine_plugins.client.transport import Transport


class VLLMOps:
    """Calls vLLM's dev-mode routes and reads their answers."""

    def __init__(self, transport: Transport) -> None:
        self.t = transport

    async def loads(self, timeout_s: float) -> Load:
        """Running and waiting from ``GET /metrics`` (may lag right after an abort)."""
        text = await self.t.call("GET", "/metrics", timeout_s=timeout_s, expect_json=False)
        try:
            return parse_vllm_metrics(text)
        except LoadParseError as exc:
            raise ServerError(self.t.url, "protocol", f"GET /metrics: {exc}") from None

    async def abort(self, request_ids: Optional[list[str]], wait: bool, timeout_s: float) -> AbortOutcome:
        """``POST /abort_requests``; with *wait* and no ids, drained through a pause (see :meth:`drain`)."""
        if wait and not request_ids:
            return await self.drain(Deadline.after(timeout_s), lambda *a: None)
        started = time.monotonic()
        await self.t.call("POST", "/abort_requests", {"request_ids": list(request_ids or [])}, timeout_s=timeout_s)
        note = "vLLM reports the number of ids requested, not aborted"
        if request_ids and wait:
            # The route awaits AsyncLLM.abort, which finishes the requests in the front end.
            note += "; vLLM finished them in its front end before answering"
        return AbortOutcome(None, None, None, False, 1, time.monotonic() - started, note)

    async def abort_stale(self, selector: StaleSelector, wait: bool, timeout_s: float) -> AbortOutcome:
        """Not offered natively: refused without sending anything, never widened to an abort-all."""
        raise ServerError(self.t.url, "unsupported", stale_unsupported(selector, "vLLM", "/abort_requests"))

    async def drain(self, deadline: Deadline, progress: Progress) -> AbortOutcome:
        """Abort all, then ``/pause?mode=abort`` (returns once the engine has finished every request)
        and ``/resume`` unless the server was paused already."""
        started = time.monotonic()
        progress(self.t.url, "aborting", None)
        was_paused = (await self.is_paused(deadline.remaining())).is_paused
        r = await self.t.call("POST", "/abort_requests", {}, timeout_s=deadline.remaining())
        tracked = r.get("aborted") if isinstance(r, dict) else None
        progress(self.t.url, "waiting", tracked)
        await self.t.call("POST", "/pause", params={"mode": "abort", "clear_cache": "false"}, timeout_s=deadline.remaining())
        if not was_paused:
            await self.t.call("POST", "/resume", timeout_s=max(deadline.remaining(), 1.0))
        progress(self.t.url, "idle", 0)
        note = "aborted the requests vLLM tracked, then drained with /pause?mode=abort" + ("" if was_paused else " and /resume")
        return AbortOutcome(tracked, 0, True, False, 1, time.monotonic() - started, note)

    async def update_weight_version(self, new_version: str, abort_all: bool, timeout_s: float) -> VersionOutcome:
        """``POST /update_weight_version`` (never aborts in vLLM; *abort_all* drains first)."""
        deadline = Deadline.after(timeout_s)
        previous = None
        info = await self.t.call("GET", "/weight_info", timeout_s=timeout_s)
        if isinstance(info, dict):
            previous = info.get("weight_version")
        aborted: Optional[int] = 0
        if abort_all:
            aborted = (await self.drain(deadline, lambda *a: None)).aborted
        await self.t.call("POST", "/update_weight_version", {"new_version": new_version}, timeout_s=deadline.remaining() or 1.0)
        return VersionOutcome(new_version, previous, aborted)

    async def pause(self, mode: str, timeout_s: float, clear_cache: Optional[bool] = None) -> PauseOutcome:
        """``POST /pause?mode=`` (abort or keep), with ``clear_cache`` when it is given."""
        params = {"mode": mode} if clear_cache is None else {"mode": mode, "clear_cache": str(clear_cache).lower()}
        await self.t.call("POST", "/pause", params=params, timeout_s=timeout_s)
        return PauseOutcome(True, mode)

    async def resume(self, timeout_s: float) -> PauseOutcome:
        """``POST /resume``."""
        await self.t.call("POST", "/resume", timeout_s=timeout_s)
        return PauseOutcome(False, None)

    async def is_paused(self, timeout_s: float) -> PauseOutcome:
        """``GET /is_paused`` (vLLM does not say in which mode)."""
        r = await self.t.call("GET", "/is_paused", timeout_s=timeout_s)
        return PauseOutcome(bool(r["is_paused"]), None)

    async def partial_generate(self, body: dict, timeout_s: Optional[float]) -> PartialGenerateResult:
        """Not offered natively."""
        raise ServerError(self.t.url, "unsupported", "partial generation needs the engine-plugins plugin on vLLM (VLLM_PLUGINS=engine_plugins)")
