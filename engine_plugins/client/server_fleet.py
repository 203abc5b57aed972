"""A fleet of servers reached directly: each operation runs on every server at once, under one
overall deadline, and gives one result per server. A server that is down, refuses, answers
404/5xx, hangs or disappears mid-call gets a failed result with a clear message; the others'
results are kept.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncContextManager, Awaitable, Callable, Optional, Sequence, Union

from engine_plugins.contract.schema import DEFAULT_LEASE_S
from engine_plugins.client.errors import ServerError
from engine_plugins.client.fleet_results import (
    NOT_BEGUN,
    FleetResult,
    ServerResult,
    WeightSwapRun,
    weight_swap_run,
)
from engine_plugins.client.polling import Deadline
from engine_plugins.client.results import Progress, StaleSelector, no_progress
from engine_plugins.client.server import ServerClient
from engine_plugins.client.transport import HttpClient, HttpClientOwner

# After the overall deadline, servers get this long to hand in what they have before being cut.
GRACE_S = 0.5


async def _not_begun(url: str) -> Any:
    raise ServerError(url, "unsupported", NOT_BEGUN)


class ServerFleet(HttpClientOwner):
    """Many servers behind one API, one :class:`ServerClient` each:
    ``async with ServerFleet(urls, api_key=...) as fleet: ...``. Each of *urls* is a server's URL
    or the handle of a Ray actor holding an engine (:class:`engine_plugins.inprocess.ContractActor`),
    mixed as they come; *api_key* goes to the URLs only.

    The server clients share one HTTP client: this package's own (:mod:`.http1`, kept-alive
    connections per server), made here and closed by :meth:`aclose`, unless *http* is given
    (an httpx client, then left open).
    """

    def __init__(self, urls: Sequence[Union[str, Any]], api_key: Optional[str] = None, http: Optional[HttpClient] = None) -> None:
        if not urls:
            raise ValueError("a fleet needs at least one URL or actor handle (or a gateway)")
        # One client for all: its idle connections are kept per server, so a call never looks
        # at the other servers' connections (httpcore's one pool scans them all at every call).
        super().__init__(api_key, http)
        self.servers = [ServerClient(url, api_key=api_key, http=self.http) for url in urls]

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
                result.set_failure("timeout", f"no answer within the overall deadline of {timeout_s:g} s")
                result.seconds = time.monotonic() - started
        return FleetResult(operation, results, time.monotonic() - started)

    async def _one(self, server: ServerClient, call, deadline: Deadline, result: ServerResult) -> None:
        started = time.monotonic()
        try:
            result.set_value(await call(server, deadline))
        except ServerError as exc:
            result.set_failure(exc.kind, exc.message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not lose the other servers' results
            result.set_failure("internal", f"{type(exc).__name__}: {exc}")
        finally:
            result.seconds = time.monotonic() - started
            if server._detection is not None:
                result.api = server._detection.detail

    async def detect(self, timeout_s: float = 10.0) -> FleetResult:
        """What every server is."""
        return await self.run("detect", lambda s, d: s.detection(d.remaining()), timeout_s)

    async def loads(self, timeout_s: float = 10.0) -> FleetResult:
        """Every server's loads."""
        return await self.run("loads", lambda s, d: s.loads(d.remaining()), timeout_s)

    async def abort(self, request_ids: Optional[Sequence[str]] = None, wait: bool = False, timeout_s: float = 30.0) -> FleetResult:
        """Abort everything (or *request_ids*, on every server) once; with *wait*, until released."""
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
        StaleSelector(admitted_before, max_staleness)  # a bad selector is the caller's error, raised here
        return await self.run(
            "abort_stale", lambda s, d: s.abort_stale(admitted_before, max_staleness, wait, d.remaining()), timeout_s
        )

    async def abort_until_idle(self, timeout_s: float = 60.0, progress: Progress = no_progress) -> FleetResult:
        """Abort until every server is idle, concurrently, all within *timeout_s*; a result per server."""
        return await self.run("abort_until_idle", lambda s, d: s.abort_until_idle(deadline=d, progress=progress), timeout_s)

    async def update_weight_version(self, new_version: str, abort_all_requests: bool = False, timeout_s: float = 30.0) -> FleetResult:
        """Set the weight version everywhere (in-flight requests keep going unless asked)."""
        return await self.run(
            "update_weight_version", lambda s, d: s.update_weight_version(new_version, abort_all_requests, d.remaining()), timeout_s
        )

    async def pause(self, mode: str = "abort", timeout_s: float = 30.0, clear_cache: Optional[bool] = None) -> FleetResult:
        """Pause every server in *mode* (*clear_cache*: as :meth:`ServerClient.pause`)."""
        return await self.run("pause", lambda s, d: s.pause(mode, d.remaining(), clear_cache), timeout_s)

    def weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                    lease_s: float = DEFAULT_LEASE_S, timeout_s: float = 30.0) -> AsyncContextManager[WeightSwapRun]:
        """``async with fleet.weight_swap("v8") as swap: <load the weights>``: begin on every
        server, then, on a normal exit, commit on each server that began (``swap.began``,
        ``swap.committed``: one result per server). A server that failed to begin is not
        committed (its failure says why); on an exception the swaps are left open, the servers
        paused (their weights may be half-loaded), and their leases report them expired."""
        return weight_swap_run(lambda: self.begin_weight_swap(version, mode, clear_cache, lease_s, timeout_s),
                               lambda began: self.commit_weight_swap(version, began, timeout_s))

    async def begin_weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                                lease_s: float = DEFAULT_LEASE_S, timeout_s: float = 30.0) -> FleetResult:
        """Begin a weight swap to *version* on every server (see :meth:`weight_swap`)."""
        return await self.run(
            "begin_weight_swap", lambda s, d: s.begin_weight_swap(version, mode, clear_cache, lease_s, d.remaining()), timeout_s
        )

    async def commit_weight_swap(self, version: str, began: Optional[Sequence[str]] = None, timeout_s: float = 30.0) -> FleetResult:
        """Commit the open weight swap to *version* on every server, or only on those (by URL)
        in *began*: each other server gets a failure saying its swap did not begin."""
        return await self.run(
            "commit_weight_swap",
            lambda s, d: s.commit_weight_swap(version, d.remaining()) if began is None or s.url in began else _not_begun(s.url),
            timeout_s,
        )

    async def resume(self, timeout_s: float = 30.0) -> FleetResult:
        """Resume every server."""
        return await self.run("resume", lambda s, d: s.resume(d.remaining()), timeout_s)

    async def is_paused(self, timeout_s: float = 10.0) -> FleetResult:
        """Every server's pause state."""
        return await self.run("is_paused", lambda s, d: s.is_paused(d.remaining()), timeout_s)
