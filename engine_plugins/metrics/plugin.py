"""The metrics plugin's hooks: it decorates the operations it measures and observes the others.

``abort``, ``update_weight_version``, ``partial_generate`` and the weight swap's ``begin`` and
``commit`` call the control themselves and record what it did, so they answer: the
implementations after this plugin (the engine's own, and plugins registered before this one)
are not called for these. ``loads``, ``pause``,
``resume`` and ``is_paused`` only refresh the gauges and defer. Only the hooks' arguments are
used: the control's operations, its registry of in-flight requests, and the request's path.
"""

from __future__ import annotations

import time
import weakref
from typing import Any, Callable, Optional

from engine_plugins import hookimpl
from engine_plugins.core import weight_swap

from engine_plugins.metrics import instruments
from engine_plugins.metrics.instruments import Instruments


@hookimpl
async def abort(control, request_ids, wait, timeout_s, reason, http_request):
    """Abort through the control; count the requests it aborted and time its wait."""
    m = instruments.get()
    if m is None:
        return None
    started = time.perf_counter()
    result = await control.abort(request_ids, wait, timeout_s, reason)
    if wait:
        m.abort_wait_seconds.labels(reason=reason).observe(time.perf_counter() - started)
    m.requests_aborted.labels(route=_route(http_request), reason=reason).inc(result.aborted)
    _refresh(m, control)
    return result


@hookimpl
async def update_weight_version(control, new_version, abort_all_requests):
    """Bump the version through the control; count the bump and show the new version."""
    m = instruments.get()
    if m is None:
        return None
    result = await control.update_weight_version(new_version, abort_all_requests)
    m.weight_version_updates.inc()
    _refresh(m, control)
    return result


@hookimpl
async def partial_generate(control, input_ids, sampling_params, request_id, max_staleness):
    """Generate through the control; count cancelled generations and the tokens they returned,
    and the prompt tokens the engine served from its prefix cache."""
    m = instruments.get()
    if m is None:
        return None
    _refresh(m, control)
    try:
        result = await control.partial_generate(input_ids, sampling_params, request_id, max_staleness)
    finally:
        _refresh(m, control)
    if result.cancelled:
        m.partial_generations_cancelled.inc()
        m.salvaged_tokens.inc(len(result.output_ids))
    if result.cached_tokens is not None:
        # Scoped by weight version (unless turned off): hits within a version show the cache still works.
        m.prefix_cache_queries.inc(len(input_ids))
        m.prefix_cache_hits.inc(result.cached_tokens)
    return result


@hookimpl
async def begin_weight_swap(control, version, mode, clear_cache, lease_s, timeout_s):
    """Begin the swap through the control; show it open, with its lease."""
    m = instruments.get()
    if m is None:
        return None
    try:
        return await weight_swap.begin_weight_swap(control, version, mode, clear_cache, lease_s, timeout_s)
    finally:
        _refresh(m, control)


@hookimpl
async def commit_weight_swap(control, swap_id, version):
    """Commit the swap through the control; show it closed."""
    m = instruments.get()
    if m is None:
        return None
    try:
        return await weight_swap.commit_weight_swap(control, swap_id, version)
    finally:
        _refresh(m, control)


@hookimpl
def loads(control):
    """Refresh the gauges; the next implementation answers."""
    _observe(control)


@hookimpl
def pause(control):
    """Refresh the gauges; the next implementation answers."""
    _observe(control)


@hookimpl
def resume(control):
    """Refresh the gauges; the next implementation answers."""
    _observe(control)


@hookimpl
def is_paused(control):
    """Refresh the gauges; the next implementation answers."""
    _observe(control)


def _observe(control: Any) -> None:
    m = instruments.get()
    if m is not None:
        _refresh(m, control)


def _route(http_request: Any) -> str:
    return http_request.url.path if http_request is not None else "none"


# The control whose registry the in-flight gauges read at scrape time (in-process mode), and the
# version the weight_version gauge shows. One engine per process; a new control (the tests build
# several) takes over.
_followed: Optional[Callable[[], Any]] = None
_shown_version: Optional[str] = None


def _refresh(m: Instruments, control: Any) -> None:
    _show_version(m, control.weight_version())
    swap = control.open_weight_swap()
    m.weight_swap_open.set(0 if swap is None else 1)
    m.weight_swap_lease_expires.set(0 if swap is None else swap.lease_expires_at)
    if m.multiprocess:
        # Multiprocess mode exports only what is written to its files, not callbacks: the
        # gauges hold the figures of the last contract call.
        m.requests_in_flight.set(len(control.registry))
        m.requests_held.set(_held(control))
    else:
        _follow(m, control)


def _follow(m: Instruments, control: Any) -> None:
    global _followed
    if _followed is None:
        m.requests_in_flight.set_function(lambda: _read_followed(lambda c: len(c.registry)))
        m.requests_held.set_function(lambda: _read_followed(_held))
    if _followed is None or _followed() is not control:
        _followed = weakref.ref(control)


def _read_followed(read: Callable[[Any], int]) -> float:
    control = _followed() if _followed is not None else None
    return 0.0 if control is None else float(read(control))


def _held(control: Any) -> int:
    # select() copies the entries at once, so a scrape from another thread cannot see the
    # registry change size mid-count.
    return sum(1 for entry in control.registry.select() if not entry.dispatched)


def _show_version(m: Instruments, version: str) -> None:
    global _shown_version
    if version == _shown_version:
        return
    if _shown_version is not None:
        m.weight_version.labels(version=_shown_version).set(0)
        if not m.multiprocess:  # label removal is not implemented in multiprocess mode
            m.weight_version.remove(_shown_version)
    m.weight_version.labels(version=version).set(1)
    _shown_version = version
