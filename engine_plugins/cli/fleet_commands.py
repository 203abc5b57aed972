"""``loads``, ``abort``, ``pause``, ``resume``, ``version``, ``swap-begin`` and ``swap-commit``: one
fleet operation each, shown as a table (or JSON) with one row per server."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any, Callable, Optional, Sequence

from engine_plugins.client import Fleet, FleetLike, FleetResult, ServerFleet, StaleSelector
from engine_plugins.client.gateway import DEFAULT_SELECTOR
from engine_plugins.cli import exit_codes
from engine_plugins.cli.render import has_rich, print_json, print_table


def _status(result) -> str:
    if result.ok:
        note = getattr(result.value, "note", "")
        return f"ok{': ' + note if note else ''}"
    return f"{'TIMEOUT' if result.kind == 'timeout' else 'FAILED'} ({result.kind}): {result.error}"


def _show(args: argparse.Namespace, fleet_result: FleetResult, title: str, columns: Sequence[tuple[str, Callable[[Any], Any]]]) -> int:
    """Print the result and return the exit code."""
    code = exit_codes.for_fleet(fleet_result)
    if args.json:
        print_json({**fleet_result.to_dict(), "exit_code": code})
        return code
    headers = ["server", "api", *[name for name, _ in columns], "time", "status"]
    rows = []
    for r in fleet_result.results:
        values = [get(r.value) if r.ok or r.value is not None else "" for _, get in columns]
        rows.append([r.url, r.api or "?", *values, f"{r.seconds:.2f}s", _status(r)])
    failed = len(fleet_result.failed)
    print_table(f"{title}: {len(rows) - failed}/{len(rows)} ok in {fleet_result.seconds:.2f} s", headers, rows)
    return code


def _known(value: Any) -> Any:
    return "?" if value is None else value


async def loads(args: argparse.Namespace, fleet: FleetLike) -> int:
    """Every server's running, waiting and total requests."""
    result = await fleet.loads(args.timeout)
    return _show(args, result, "loads", [
        ("running", lambda l: l.running), ("waiting", lambda l: l.waiting), ("total", lambda l: l.total),
        ("in_flight", lambda l: _known(l.in_flight)), ("paused", lambda l: _known(l.paused)),
        ("weight_version", lambda l: _known(l.weight_version)), ("by_version", lambda l: _by_version(l.in_flight_by_version)),
    ])


def _by_version(counts: Optional[dict]) -> str:
    """In-flight requests by admission version, oldest first: ``v7:3 v8:1``."""
    if counts is None:
        return "?"
    return " ".join(f"{version}:{n}" for version, n in counts.items()) or "-"


ABORT_COLUMNS = [
    ("aborted", lambda o: _known(o.aborted)), ("in_flight", lambda o: _known(o.in_flight)),
    ("idle", lambda o: _known(o.idle)), ("rounds", lambda o: o.rounds),
]


async def abort(args: argparse.Namespace, fleet: FleetLike) -> int:
    """Abort (by ids, by age, or everything); ``--wait`` with no selector aborts until every server is idle."""
    if args.admitted_before is not None or args.max_staleness is not None:
        selector = StaleSelector(args.admitted_before, args.max_staleness)
        result = await fleet.abort_stale(args.admitted_before, args.max_staleness, wait=args.wait, timeout_s=args.timeout)
        return _show(args, result, f"abort {selector.describe()}" + (" (wait)" if args.wait else ""), ABORT_COLUMNS)
    if args.ids or not args.wait:
        result = await fleet.abort(args.ids or None, wait=args.wait, timeout_s=args.timeout)
        return _show(args, result, "abort" + (" (wait)" if args.wait else ""), ABORT_COLUMNS)
    live = _LiveProgress(fleet, args.timeout) if not args.json and has_rich() and sys.stdout.isatty() else None
    if live is None:
        result = await fleet.abort_until_idle(args.timeout)
    else:
        with live:
            result = await fleet.abort_until_idle(args.timeout, progress=live.update)
    return _show(args, result, "abort until idle", ABORT_COLUMNS)


async def pause(args: argparse.Namespace, fleet: FleetLike) -> int:
    """Pause every server in ``--mode``."""
    result = await fleet.pause(args.mode, args.timeout, False if args.keep_kv else None)
    return _show(args, result, f"pause ({args.mode})", [("paused", lambda p: _known(p.is_paused)), ("mode", lambda p: _known(p.mode))])


async def resume(args: argparse.Namespace, fleet: FleetLike) -> int:
    """Resume every server."""
    result = await fleet.resume(args.timeout)
    return _show(args, result, "resume", [("paused", lambda p: _known(p.is_paused))])


async def version(args: argparse.Namespace, fleet: FleetLike) -> int:
    """Set the weight version on every server (in-flight requests keep going unless ``--abort-all``)."""
    result = await fleet.update_weight_version(args.new_version, args.abort_all, args.timeout)
    return _show(args, result, f"weight version -> {args.new_version}", [
        ("previous", lambda v: _known(v.previous_version)), ("new", lambda v: v.new_version), ("aborted", lambda v: _known(v.aborted)),
    ])


_SWAP_COLUMNS = [("swap", lambda s: s.swap_id), ("version", lambda s: f"{s.previous_version} -> {s.version}"),
                 ("state", lambda s: s.state), ("paused", lambda s: s.is_paused)]


async def swap_begin(args: argparse.Namespace, fleet: FleetLike) -> int:
    """Begin a weight swap to ``--version`` on every server: paused until ``swap-commit``."""
    clear_cache = False if args.keep_kv else None
    result = await fleet.begin_weight_swap(args.version, args.mode, clear_cache, args.lease, args.timeout)
    return _show(args, result, f"weight swap to {args.version}: begun", _SWAP_COLUMNS)


async def swap_commit(args: argparse.Namespace, fleet: FleetLike) -> int:
    """Commit every server's open weight swap to ``--version``: the version applied, resumed."""
    result = await fleet.commit_weight_swap(args.version, timeout_s=args.timeout)
    return _show(args, result, f"weight swap to {args.version}: committed", _SWAP_COLUMNS)


class _LiveProgress:
    """A live table of each server's phase while waiting for idle (rich, terminals only)."""

    def __init__(self, fleet: FleetLike, timeout_s: float) -> None:
        from rich.live import Live

        self.started = time.monotonic()
        self.timeout_s = timeout_s
        # Behind a gateway the workers are known only once smg answers: their rows come with it.
        urls = [s.url for s in fleet.servers] if isinstance(fleet, ServerFleet) else []
        self.state = {url: ("starting", None) for url in urls}
        self.live = Live(self._table(), refresh_per_second=8, transient=True)

    def __enter__(self) -> "_LiveProgress":
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def update(self, url: str, phase: str, in_flight: Optional[int]) -> None:
        """The progress callback: record and redraw."""
        self.state[url] = (phase, in_flight)
        self.live.update(self._table())

    def _table(self):
        from rich.table import Table

        elapsed = time.monotonic() - self.started
        table = Table(title=f"waiting for idle: {elapsed:.1f} s of {self.timeout_s:g} s", title_justify="left")
        for header in ("server", "phase", "in flight"):
            table.add_column(header)
        for url, (phase, n) in self.state.items():
            table.add_row(url, phase, "?" if n is None else str(n))
        return table


def _fleet(args: argparse.Namespace, api_key: Optional[str]) -> FleetLike:
    """The servers named on the command line, or the workers behind ``--gateway``."""
    if args.gateway is not None:
        return Fleet(gateway=args.gateway, api_key=api_key, selector=args.selector or DEFAULT_SELECTOR)
    return Fleet(args.urls, api_key=api_key)


COMMANDS = {"loads": loads, "abort": abort, "pause": pause, "resume": resume, "version": version,
            "swap-begin": swap_begin, "swap-commit": swap_commit}


def run(args: argparse.Namespace, api_key: Optional[str]) -> int:
    """Run the fleet command named by ``args.command``."""

    async def go() -> int:
        async with _fleet(args, api_key) as fleet:
            return await COMMANDS[args.command](args, fleet)

    return asyncio.run(go())
