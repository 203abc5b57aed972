"""A fleet: many servers behind one API, each operation run on all of them at once with one
result per server. Two kinds, the same operations (:class:`FleetLike`):

- :class:`~.server_fleet.ServerFleet`: the servers' URLs, each reached directly;
- :class:`~.gateway_fleet.GatewayFleet`: the workers behind an smg gateway (``smg launch
  --enable-rl``), found by smg's discovery and reached through its fan-out.

:func:`Fleet` makes the one its arguments name.
"""

from __future__ import annotations

from typing import Any, AsyncContextManager, Optional, Protocol, Sequence, Union, overload, runtime_checkable

import httpx

from engine_plugins.contract.schema import DEFAULT_LEASE_S
from engine_plugins.client.fleet_results import FleetResult, ServerResult, WeightSwapRun
from engine_plugins.client.gateway import DEFAULT_SELECTOR
from engine_plugins.client.gateway_fleet import GatewayFleet
from engine_plugins.client.results import Progress, no_progress
from engine_plugins.client.server_fleet import ServerFleet

__all__ = ["Fleet", "FleetLike", "FleetResult", "GatewayFleet", "ServerFleet", "ServerResult", "WeightSwapRun"]


@runtime_checkable
class FleetLike(Protocol):
    """What every fleet offers: ``async with`` it, then run operations that each give a
    :class:`FleetResult`, one :class:`ServerResult` per server (or gateway worker), within the
    operation's *timeout_s* overall. A server's failure is its result's; the others are kept."""

    async def __aenter__(self) -> "FleetLike": ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def aclose(self) -> None:
        """Close the HTTP clients the fleet made (one passed in is left open)."""
        ...

    async def detect(self, timeout_s: float = 10.0) -> FleetResult:
        """What every server is (its engine, version and API)."""
        ...

    async def loads(self, timeout_s: float = 10.0) -> FleetResult:
        """Every server's loads."""
        ...

    async def abort(self, request_ids: Optional[Sequence[str]] = None, wait: bool = False, timeout_s: float = 30.0) -> FleetResult:
        """Abort everything (or *request_ids*, on every server) once; with *wait*, until released."""
        ...

    async def abort_stale(self, admitted_before: Optional[str] = None, max_staleness: Optional[int] = None,
                          wait: bool = False, timeout_s: float = 30.0) -> FleetResult:
        """Abort the requests admitted under a version older than *admitted_before*, or
        *max_staleness* or more bumps ago (exactly one; each server orders its own bumps);
        with *wait*, until released. A bad selector raises ValueError before anything is sent."""
        ...

    async def abort_until_idle(self, timeout_s: float = 60.0, progress: Progress = no_progress) -> FleetResult:
        """Abort until every server is idle, all within *timeout_s*; *progress* hears each server's phase."""
        ...

    async def update_weight_version(self, new_version: str, abort_all_requests: bool = False, timeout_s: float = 30.0) -> FleetResult:
        """Set the weight version everywhere (in-flight requests keep going unless asked)."""
        ...

    async def pause(self, mode: str = "abort", timeout_s: float = 30.0, clear_cache: Optional[bool] = None) -> FleetResult:
        """Pause every server in *mode* (``abort``, ``retract`` or ``keep``)."""
        ...

    async def resume(self, timeout_s: float = 30.0) -> FleetResult:
        """Resume every server."""
        ...

    async def is_paused(self, timeout_s: float = 10.0) -> FleetResult:
        """Every server's pause state."""
        ...

    def weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                    lease_s: float = DEFAULT_LEASE_S, timeout_s: float = 30.0) -> AsyncContextManager[WeightSwapRun]:
        """``async with fleet.weight_swap("v8") as swap: <load the weights>``: begin everywhere,
        then on a normal exit commit where it began; on an exception the swaps stay open."""
        ...

    async def begin_weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                                lease_s: float = DEFAULT_LEASE_S, timeout_s: float = 30.0) -> FleetResult:
        """Begin a weight swap to *version* on every server."""
        ...

    async def commit_weight_swap(self, version: str, began: Optional[Sequence[str]] = None, timeout_s: float = 30.0) -> FleetResult:
        """Commit the open swap to *version* everywhere, or only on the servers (by URL) in *began*."""
        ...


@overload
def Fleet(urls: Sequence[Union[str, Any]], api_key: Optional[str] = None, http: Optional[httpx.AsyncClient] = None) -> ServerFleet: ...


@overload
def Fleet(*, gateway: str, api_key: Optional[str] = None, http: Optional[httpx.AsyncClient] = None,
          selector: str = DEFAULT_SELECTOR) -> GatewayFleet: ...


def Fleet(  # noqa: N802 -- the name the fleet class had; calls to it keep working
    urls: Sequence[Union[str, Any]] = (),
    api_key: Optional[str] = None,
    http: Optional[httpx.AsyncClient] = None,
    gateway: Optional[str] = None,
    selector: str = DEFAULT_SELECTOR,
) -> Union[ServerFleet, GatewayFleet]:
    """``Fleet(urls, api_key=...)``: a :class:`ServerFleet` of those servers, each a URL or the
    handle of a Ray actor holding an engine (``Fleet([url, handle])``: results name it
    ``ray://<actor name or id>``); or
    ``Fleet(gateway="http://smg:30000", api_key=..., selector=...)``: a :class:`GatewayFleet` of
    the workers behind that smg gateway (*api_key* the gateway's, *selector* smg's label
    selector). *http*, when given, is shared and left open."""
    if gateway is not None and urls:
        raise ValueError("give the servers' URLs or a gateway's, not both")
    if gateway is not None:
        return GatewayFleet(gateway, api_key=api_key, http=http, selector=selector)
    return ServerFleet(urls, api_key=api_key, http=http)
