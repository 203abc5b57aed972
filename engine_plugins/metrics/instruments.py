"""The plugin's metrics, made once per process in prometheus_client's default registry.

They are made on first use, not at import: SGLang loads plugins before it sets
``PROMETHEUS_MULTIPROC_DIR``, and prometheus_client decides between in-process and multiprocess
values when it is first imported, so importing it at plugin load would take SGLang's own metrics
off its ``/metrics``. Made once (the stub and the tests build several plugin stacks in one
process, and a second registration of a name is an error in prometheus_client).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

PREFIX = "engine_plugins_"

# Abort waits run from milliseconds to ENGINE_PLUGINS_ABORT_TIMEOUT_S (30 s by default) and beyond.
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass(frozen=True)
class Instruments:
    """Every metric of the plugin (what each means, for users: :data:`DESCRIPTIONS`)."""

    requests_aborted: Any
    """Counter, labels ``route``, ``reason``: requests actually aborted by an abort."""
    salvaged_tokens: Any
    """Counter: tokens returned by partial generations that were cancelled mid-way."""
    partial_generations_cancelled: Any
    """Counter: partial generations that returned cancelled (aborted, paused, or refused while paused)."""
    weight_version_updates: Any
    """Counter: version bumps."""
    weight_version: Any
    """Gauge, label ``version``: 1 for the weight version in force."""
    abort_wait_seconds: Any
    """Histogram, label ``reason``: how long aborts with ``wait`` waited."""
    requests_in_flight: Any
    """Gauge: requests the server has accepted and not released."""
    requests_held: Any
    """Gauge: of those, requests held before the scheduler (tokenizing, at a pause gate)."""
    weight_swap_open: Any
    """Gauge: 1 while a weight swap is open (begun, not committed)."""
    weight_swap_lease_expires: Any
    """Gauge: when the open weight swap's lease runs out (Unix time; 0 without one)."""
    prefix_cache_queries: Any
    """Counter: prompt tokens of partial generations whose prefix-cache hits the engine reported."""
    prefix_cache_hits: Any
    """Counter: of those, the tokens it served from its prefix cache (its own count)."""
    multiprocess: bool
    """prometheus_client runs in multiprocess mode (SGLang): no callbacks, no label removal."""


# Each metric's row in the docs' metrics table (docs/metrics.md, written from this and the metrics
# themselves by `python -m tools.docs_tables`), by Instruments field, in the order the table shows.
DESCRIPTIONS: dict[str, str] = {
    "requests_aborted": "requests actually aborted through the `abort` hook; `route` is the path of the contract route that "
    "led to the abort, `reason` the hook's. Stale aborts are `reason=\"stale\"`: on `route=\"/abort_requests\"` a client's "
    "abort by age, on `route=\"/update_weight_version\"` the partial generations a bump fenced for their `max_staleness`",
    "abort_wait_seconds": "how long aborts with `wait` waited (until the covered requests were released, or the time-out)",
    "partial_generations_cancelled": "partial generations that returned `cancelled: true`: aborted or paused mid-way, or "
    "refused while paused in `abort` mode",
    "salvaged_tokens": "the tokens (each with its logprob) those returned",
    "weight_version_updates": "version bumps",
    "weight_version": "1 for the weight version in force",
    "weight_swap_open": "1 while a weight swap is open (begun, not committed)",
    "weight_swap_lease_expires": "when the open swap's lease runs out (Unix time; 0 without one). An alert on "
    "`time() > engine_plugins_weight_swap_lease_expires_timestamp_seconds > 0` finds a server whose trainer died mid-swap",
    "requests_in_flight": "requests accepted and not released, on every route",
    "requests_held": "of those, the ones held before the scheduler (tokenizing, at a pause gate)",
    "prefix_cache_queries": "prompt tokens of partial generations whose prefix-cache hits the engine reported",
    "prefix_cache_hits": "of those, the tokens the engine served from its prefix cache (its own count): with the cache "
    "scoped by version, hits within a version show it still works. The engines' own routes: `vllm:prefix_cache_hits`, "
    "SGLang's `meta_info.cached_tokens`",
}
assert set(DESCRIPTIONS) == {f for f in Instruments.__dataclass_fields__ if f != "multiprocess"}

_instruments: Optional[Instruments] = None


def get() -> Optional[Instruments]:
    """The metrics, made on the first call; None when prometheus_client is not installed."""
    global _instruments
    if _instruments is None:
        try:
            _instruments = _make()
        except ImportError:  # prometheus_client is not installed
            return None
    return _instruments


def _make() -> Instruments:
    from prometheus_client import Counter, Gauge, Histogram, values

    # In multiprocess mode a gauge is written by this (the HTTP server's) process only: livesum
    # reports its value while it lives.
    gauge_mode = "livesum"
    return Instruments(
        requests_aborted=Counter(
            PREFIX + "requests_aborted",
            "Requests actually aborted, by the contract route that led to the abort and why it was made",
            ["route", "reason"],
        ),
        salvaged_tokens=Counter(
            PREFIX + "salvaged_tokens", "Tokens returned with their logprobs by partial generations cancelled mid-way"
        ),
        partial_generations_cancelled=Counter(
            PREFIX + "partial_generations_cancelled", "Partial generations that returned cancelled"
        ),
        weight_version_updates=Counter(PREFIX + "weight_version_updates", "Weight version bumps"),
        weight_version=Gauge(
            PREFIX + "weight_version", "1 for the weight version in force", ["version"], multiprocess_mode=gauge_mode
        ),
        abort_wait_seconds=Histogram(
            PREFIX + "abort_wait_seconds",
            "How long aborts with wait took, until every covered request was released or the time-out",
            ["reason"],
            buckets=WAIT_BUCKETS,
        ),
        requests_in_flight=Gauge(
            PREFIX + "requests_in_flight", "Requests accepted and not yet released", multiprocess_mode=gauge_mode
        ),
        requests_held=Gauge(
            PREFIX + "requests_held",
            "Requests accepted but held before the scheduler (tokenizing, at a pause gate)",
            multiprocess_mode=gauge_mode,
        ),
        weight_swap_open=Gauge(
            PREFIX + "weight_swap_open", "1 while a weight swap is open (begun, not committed)", multiprocess_mode=gauge_mode
        ),
        # A timestamp, not an "expired" flag: multiprocess mode cannot compute one at scrape time,
        # and an alert compares it with time() (as with certificate expiry).
        weight_swap_lease_expires=Gauge(
            PREFIX + "weight_swap_lease_expires_timestamp_seconds",
            "When the open weight swap's lease runs out (Unix time; 0 without one): past it, the trainer is gone",
            multiprocess_mode=gauge_mode,
        ),
        prefix_cache_queries=Counter(
            PREFIX + "prefix_cache_queries",
            "Prompt tokens of partial generations whose prefix-cache hits the engine reported",
        ),
        prefix_cache_hits=Counter(
            PREFIX + "prefix_cache_hits",
            "Prompt tokens of partial generations the engine served from its prefix cache (its own count)",
        ),
        # Decided by prometheus_client when it was first imported, from PROMETHEUS_MULTIPROC_DIR.
        multiprocess=values.ValueClass is not values.MutexValue,
    )
