"""A fleet of servers: each operation runs on every server at once, under one overall deadline,
and gives one result per server. A server that is down, refuses, answers 404/5xx, hangs or
disappears mid-call gets a failed result with a clear message; the others' results are kept.

Given the URL of an smg gateway (``smg launch --enable-rl``) instead of server URLs, the fleet is
the gateway's workers: smg's discovery finds them and its fan-out makes each call
(:mod:`.gateway_fleet`); the results are the same, one per worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, Sequence

import httpx

from engine_plugins.contract.schema import DEFAULT_LEASE_S
from engine_plugins.client.errors import ServerError
from engine_plugins.client.gateway import DEFAULT_SELECTOR, Gateway
from engine_plugins.client.gateway_fleet import GatewayFleet
from engine_plugins.client.polling import Deadline
from engine_plugins.client.results import Progress, StaleSelector, no_progress
from engine_plugins.client.server import ServerClient
from engine_plugins.client.transport import HttpClientOwner

# After the overall deadline, servers get this long to hand in what they have before being cut.
GRACE_S = 0.5


@dataclass
class ServerResult:
    """One server's answer to one fleet operation."""

    url: str
    ok: bool
    value: Any = None
    """The operation's outcome (Load, AbortOutcome, ...) when ok."""
    error: Optional[str] = None
    kind: Optional[str] = None
    """How it failed: ``timeout``, ``unreachable``, ``disconnected``, ``unauthorized``, ``not_found``,
    ``http``, ``protocol``, ``unsupported`` or ``internal``."""
    api: Optional[str] = None
    """What the server was detected to be, in words."""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        value = self.value
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        elif hasattr(value, "model_dump"):  # an answer of the contract's models
            value = value.model_dump()
        return {"url": self.url, "ok": self.ok, "api": self.api, "seconds": round(self.seconds, 4),
                "result": value, "error": self.error, "kind": self.kind}


@dataclass
class FleetResult:
    """The results of one operation over the fleet, in the order the URLs were given."""

    operation: str
    results: list[ServerResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every server succeeded."""
        return all(r.ok for r in self.results)

    @property
    def failed(self) -> list[ServerResult]:
        """The servers that did not succeed (timeouts included)."""
        return [r for r in self.results if not r.ok]

    @property
    def timed_out(self) -> list[ServerResult]:
        """The servers that ran out of time."""
        return [r for r in self.results if r.kind == "timeout"]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return {"operation": self.operation, "ok": self.ok, "seconds": round(self.seconds, 4),
                "servers": [r.to_dict() for r in self.results]}


@dataclass
class WeightSwapRun:
    """A fleet's weight swap (:meth:`Fleet.weight_swap`): each server's begin, then its commit."""

    began: FleetResult
    committed: Optional[FleetResult] = None


async def _not_begun(url: str) -> Any:
    raise ServerError(url, "unsupported", "its weight swap did not begin, so there is nothing to commit")


class Fleet(HttpClientOwner):
    """Many servers behind one API: ``async with Fleet(urls, api_key=...) as fleet: ...``, or the
    workers behind an smg gateway: ``Fleet(gateway="http://smg:30000", api_key=...)``.

    With *gateway*, every operation is one smg fan-out to the workers *selector* matches (smg's
    label selector; default every HTTP worker), which must have the plugin; *api_key* is then
    the gateway's key (smg sends each worker its own).
    """

    def __init__(
        self,
        urls: Sequence[str] = (),
        api_key: Optional[str] = None,
        http: Optional[httpx.AsyncClient] = None,
        gateway: Optional[str] = None,
        selector: str = DEFAULT_SELECTOR,
    ) -> None:
        if gateway is not None and urls:
            raise ValueError("give the servers' URLs or a gateway's, not both")
        if gateway is None and not urls:
            raise ValueError("a fleet needs at least one URL (or a gateway)")
        super().__init__(api_key, http)
        # A connection pool per server unless the caller shares one: httpcore's pool scans every
        # connection it holds each time a request ends, so one pool for 256 servers spent
        # seconds of the fan-out's CPU on that scan alone.
        self.servers = [ServerClient(url, api_key=api_key, http=http) for url in urls]
        self.via: Optional[GatewayFleet] = GatewayFleet(Gateway(gateway, self.http, selector)) if gateway is not None else None
        """The gateway's operations, when the fleet is behind one."""

    async def aclose(self) -> None:
        """Close the HTTP clients this fleet made (one per server, and the gateway's)."""
        await asyncio.gather(*(s.aclose() for s in self.servers))
        await super().aclose()

    async def run(
        self, operation: str, call: Callable[[ServerClient, Deadline], Awaitable[Any]], timeout_s: float
    ) -> FleetResult:
        """Run *call(server, deadline)* on every server at once; one result each, by *timeout_s* overall."""
        started = time.monotonic()
        deadline = Deadline.after(timeout_s)
        results = [ServerResult(s.url, False) for s in self.servers]
        tasks = [asyncio.create_task(self._one(s, call, deadline, results[i])) for i, s in enumerate(self.servers)]
        _, pending = await asyncio.wait(tasks, timeout=timeout_s + GRACE_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for result, task in zip(results, tasks):
            if task in pending:
                result.ok, result.kind = False, "timeout"
                result.error = f"no answer within the overall deadline of {timeout_s:g} s"
                result.seconds = time.monotonic() - started
        return FleetResult(operation, results, time.monotonic() - started)

    async def _one(self, server: ServerClient, call, deadline: Deadline, result: ServerResult) -> None:
        started = time.monotonic()
        try:
            result.value = await call(server, deadline)
            result.ok = not getattr(result.value, "timed_out", False)
            if not result.ok:
                result.kind, result.error = "timeout", getattr(result.value, "note", "") or "timed out"
        except ServerError as exc:
            result.ok, result.kind, result.error = False, exc.kind, exc.message
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not lose the other servers' results
            result.ok, result.kind, result.error = False, "internal", f"{type(exc).__name__}: {exc}"
        finally:
            result.seconds = time.monotonic() - started
            if server._detection is not None:
                result.api = server._detection.detail

    async def detect(self, timeout_s: float = 10.0) -> FleetResult:
        """What every server is."""
        if self.via:
            return await self.via.detect(timeout_s)
        return await self.run("detect", lambda s, d: s.detection(d.remaining()), timeout_s)

    async def loads(self, timeout_s: float = 10.0) -> FleetResult:
        """Every server's loads."""
        if self.via:
            return await self.via.loads(timeout_s)
        return await self.run("loads", lambda s, d: s.loads(d.remaining()), timeout_s)

    async def abort(self, request_ids: Optional[Sequence[str]] = None, wait: bool = False, timeout_s: float = 30.0) -> FleetResult:
        """Abort everything (or *request_ids*, on every server) once; with *wait*, until released."""
        if self.via:
            return await self.via.abort(request_ids, wait, timeout_s)
        return await self.run("abort", lambda s, d: s.abort(request_ids, wait, d.remaining()), timeout_s)

    async def abort_stale(
        self,
        admitted_before: Optional[str] = None,
        max_staleness: Optional[int] = None,
        wait: bool = False,
        timeout_s: float = 30.0,
    ) -> FleetResult:
        """Abort, on every server at once and within *timeout_s* overall, the requests admitted
        under a version older than *admitted_before* or *max_staleness* or more bumps ago (give
        exactly one; each server orders its own bumps); with *wait*, until they are released.
        A server without the plugin is an ``unsupported`` result, with nothing aborted there."""
        selector = StaleSelector(admitted_before, max_staleness)  # a bad selector is the caller's error, raised here
        if self.via:
            return await self.via.abort_stale(selector, wait, timeout_s)
        return await self.run(
            "abort_stale", lambda s, d: s.abort_stale(admitted_before, max_staleness, wait, d.remaining()), timeout_s
        )

    async def abort_until_idle(self, timeout_s: float = 60.0, progress: Progress = no_progress) -> FleetResult:
        """Abort until every server is idle, concurrently, all within *timeout_s*; a result per server."""
        if self.via:
            return await self.via.abort_until_idle(timeout_s, progress)
        return await self.run("abort_until_idle", lambda s, d: s.abort_until_idle(deadline=d, progress=progress), timeout_s)

    async def update_weight_version(self, new_version: str, abort_all_requests: bool = False, timeout_s: float = 30.0) -> FleetResult:
        """Set the weight version everywhere (in-flight requests keep going unless asked)."""
        if self.via:
            return await self.via.update_weight_version(new_version, abort_all_requests, timeout_s)
        return await self.run(
            "update_weight_version", lambda s, d: s.update_weight_version(new_version, abort_all_requests, d.remaining()), timeout_s
        )

    async def pause(self, mode: str = "abort", timeout_s: float = 30.0, clear_cache: Optional[bool] = None) -> FleetResult:
        """Pause every server in *mode* (*clear_cache*: as :meth:`Server.pause`)."""
        if self.via:
            return await self.via.pause(mode, timeout_s, clear_cache)
        return await self.run("pause", lambda s, d: s.pause(mode, d.remaining(), clear_cache), timeout_s)

    @contextlib.asynccontextmanager
    async def weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                          lease_s: float = DEFAULT_LEASE_S, timeout_s: float = 30.0) -> AsyncIterator["WeightSwapRun"]:
        """``async with fleet.weight_swap("v8") as swap: <load the weights>``: begin on every
        server, then, on a normal exit, commit on each server that began (``swap.began``,
        ``swap.committed``: one result per server). A server that failed to begin is not
        committed (its failure says why); on an exception the swaps are left open, the servers
        paused (their weights may be half-loaded), and their leases report them expired. Behind
        a gateway: one smg fan-out for the begin, one for the commit (to the workers that began)."""
        run = WeightSwapRun(await self.begin_weight_swap(version, mode, clear_cache, lease_s, timeout_s))
        yield run
        run.committed = await self.commit_weight_swap(version, [r.url for r in run.began.results if r.ok], timeout_s)

    async def begin_weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                                lease_s: float = DEFAULT_LEASE_S, timeout_s: float = 30.0) -> FleetResult:
        """Begin a weight swap to *version* on every server (see :meth:`weight_swap`)."""
        if self.via:
            return await self.via.begin_weight_swap(version, mode, clear_cache, lease_s, timeout_s)
        return await self.run(
            "begin_weight_swap", lambda s, d: s.begin_weight_swap(version, mode, clear_cache, lease_s, d.remaining()), timeout_s
        )

    async def commit_weight_swap(self, version: str, began: Optional[Sequence[str]] = None, timeout_s: float = 30.0) -> FleetResult:
        """Commit the open weight swap to *version* on every server, or only on those (by URL)
        in *began*: each other server gets a failure saying its swap did not begin."""
        if self.via:
            return await self.via.commit_weight_swap(version, began, timeout_s)
        return await self.run(
            "commit_weight_swap",
            lambda s, d: s.commit_weight_swap(version, d.remaining()) if began is None or s.url in began else _not_begun(s.url),
            timeout_s,
        )

    async def resume(self, timeout_s: float = 30.0) -> FleetResult:
        """Resume every server."""
        if self.via:
            return await self.via.resume(timeout_s)
        return await self.run("resume", lambda s, d: s.resume(d.remaining()), timeout_s)

    async def is_paused(self, timeout_s: float = 10.0) -> FleetResult:
        """Every server's pause state."""
        if self.via:
            return await self.via.is_paused(timeout_s)
        return await self.run("is_paused", lambda s, d: s.is_paused(d.remaining()), timeout_s)
