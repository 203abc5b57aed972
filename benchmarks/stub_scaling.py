"""Figure 5: what the control costs with 10 to 10,000 requests in flight, on the stub engine
(one decode step every 0.5 s, as the issue measured it).

For each count N, N long ``/partial_generate`` requests are put in flight, then each call is
timed ``rounds`` times:

- ``loads``: ``GET /v1/loads``;
- ``abort by id``: ``POST /abort_requests {"request_ids": [one], "wait": false}`` (the selection
  and marking; waiting would add up to one step);
- ``admit one more``: a new ``/partial_generate``, until the server holds it (in process: from
  its coroutine starting until the registry has it; over HTTP: until ``GET /v1/loads`` counts it, so that figure includes
  one or more loads calls);
- ``abort all with wait``: ``POST /abort_requests {"wait": true}`` of all N, once per round
  (the requests are then put in flight again). It ends within one step of the stub by design;
  the figure minus one step is the server's own time.

Two views side by side: **server** (the stub and the plugin in this process, each call made on
the control's hooks exactly as the HTTP route makes it, the N requests in flight as coroutines
of the same event loop: no HTTP, no client) and **client** (the stub served by uvicorn in its
own process, the N requests held over loopback HTTP by another process, each call timed by an
httpx client).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from typing import Awaitable, Callable, Iterator, Optional

import httpx

from tools.launcher.spawn import ServerProcess
from engine_plugins.contract.schema import SamplingParams
from engine_plugins.engines.stub.engine import StubEngine
from engine_plugins.engines.stub.server import create_app

from .common import stop_cleanly_on_sigterm, KEY, REPO, ms, progress, rounds_default, server_log, stats, write_json
from .hold_requests import HeldRequests

STEP_S = 0.5
LONG = {"max_new_tokens": 100_000}
INPUT = [1, 15, 27]
COUNTS = (10, 100, 1000, 10000)
OPS = ("loads", "abort by id", "admit one more", "abort all with wait")


async def _time(call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await call()
    return ms(time.perf_counter() - start)


# --- server view: the control in this process ------------------------------------------


async def server_view(n: int, rounds: int) -> dict[str, list[float]]:
    """Time each call on the hooks of a stub with *n* requests in flight (ms per call)."""
    app = create_app(StubEngine(step_s=STEP_S))
    hooks = app.state.plugin_stack.hooks
    control = hooks.control()
    params = SamplingParams(**LONG)
    out: dict[str, list[float]] = {op: [] for op in OPS}

    def fill(count: int) -> list[asyncio.Task]:
        return [asyncio.ensure_future(control.partial_generate(INPUT, params, f"bg-{uuid.uuid4().hex}")) for _ in range(count)]

    async def until_held(count: int) -> None:
        while len(control.registry) < count:
            await asyncio.sleep(0.01)

    # Admission's own time: from the new request's coroutine starting to the registry holding
    # it, all synchronous; waiting for the event loop to run it (10,000 other requests step on
    # the same loop) is not the server's cost of admitting it.
    started: dict[str, float] = {}
    held_at: dict[str, float] = {}
    add = control.registry.add

    def timed_add(rid: str, request_id: Optional[str] = None, dispatched: bool = False):
        entry = add(rid, request_id, dispatched)
        if request_id in started:
            held_at.setdefault(request_id, time.perf_counter())
        return entry

    control.registry.add = timed_add

    async def one_more(request_id: str):
        started[request_id] = time.perf_counter()
        return await control.partial_generate(INPUT, params, request_id)

    tasks = fill(n)
    await until_held(n)
    for _ in range(rounds):
        out["loads"].append(await _time(lambda: hooks.call("loads")))
        victim = next(iter(control.registry.select())).request_id
        out["abort by id"].append(await _time(lambda: hooks.call("abort", request_ids=[victim], wait=False, timeout_s=60.0, reason="request")))
        rid = f"one-more-{uuid.uuid4().hex}"
        one = asyncio.ensure_future(one_more(rid))
        while rid not in held_at:
            await asyncio.sleep(0)
        out["admit one more"].append(ms(held_at[rid] - started[rid]))
        tasks += [one, *fill(1)]  # the aborted victim is replaced: about n stay in flight
    await asyncio.sleep(0.05)  # the last replacement reaches the registry before the abort-all below
    for _ in range(rounds):
        out["abort all with wait"].append(await _time(lambda: hooks.call("abort", request_ids=None, wait=True, timeout_s=60.0, reason="request")))
        await asyncio.gather(*tasks)
        tasks = fill(n)
        await until_held(n)
    await hooks.call("abort", request_ids=None, wait=True, timeout_s=60.0, reason="request")
    await asyncio.gather(*tasks)
    return out


# --- client view: the stub over loopback HTTP -----------------------------------------


@contextlib.contextmanager
def stub_server(step_s: float = STEP_S) -> Iterator[str]:
    """One stub engine served by uvicorn in its own process; its URL."""

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "engine_plugins.engines.stub", "--port", str(port), "--api-key", KEY, "--step-s", str(step_s)]

    with ServerProcess(command, log_path=server_log("stub"), cwd=REPO, name="the stub server") as server:
        yield server.url


async def client_view(url: str, n: int, rounds: int) -> dict[str, list[float]]:
    """Time each call over HTTP on the stub at *url* with *n* requests in flight (ms per call).

    The *n* requests are held by a process of their own (:mod:`benchmarks.hold_requests`), so
    that this client only makes the timed calls."""
    out: dict[str, list[float]] = {op: [] for op in OPS}
    with HeldRequests([url]) as held:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as http:

            async def in_flight() -> int:
                return (await http.get("/v1/loads")).json()["in_flight"]

            async def until_held(count: int) -> None:
                while await in_flight() < count:
                    await asyncio.sleep(0.05)

            mine: list[asyncio.Task] = []
            await held.fill(n)
            await until_held(n)
            for _ in range(rounds):
                while await in_flight() > n:  # the request aborted last round is released at its next step
                    await asyncio.sleep(0.02)
                out["loads"].append(await _time(lambda: http.get("/v1/loads")))
                rid = f"one-more-{uuid.uuid4().hex}"
                before = await in_flight()
                start = time.perf_counter()
                mine.append(asyncio.ensure_future(http.post("/partial_generate", json={"input_ids": INPUT, "sampling_params": LONG, "request_id": rid})))
                while await in_flight() <= before:
                    pass
                out["admit one more"].append(ms(time.perf_counter() - start))
                out["abort by id"].append(await _time(lambda: http.post("/abort_requests", json={"request_ids": [rid], "wait": False})))
            for i in range(rounds):
                if i:
                    await held.fill(n)
                await until_held(n)
                out["abort all with wait"].append(await _time(lambda: http.post("/abort_requests", json={"wait": True})))
            await asyncio.gather(*mine)
        answered, failed = held.close()
    if failed:
        raise RuntimeError(f"{failed} of the held requests failed ({answered} answered)")
    return out


def run(counts: list[int], rounds: int, client: bool = True) -> dict:
    """Both views at every count; the figure's raw data."""
    rows = []
    for n in counts:
        progress(f"figure 5: {n} in flight, server view")
        row = {"in_flight": n, "server": asyncio.run(server_view(n, rounds))}
        if client:
            progress(f"figure 5: {n} in flight, client view (HTTP)")
            try:
                with stub_server() as url:
                    row["client"] = asyncio.run(client_view(url, n, rounds))
            except (httpx.HTTPError, RuntimeError) as exc:
                # Recorded, not fatal: the server's view is the figure; this one measures the client too.
                row["client_error"] = f"{type(exc).__name__}: {exc}"
                progress(f"figure 5: the client view at {n} in flight failed: {row['client_error']}")
        rows.append(row)
    return {"figure": 5, "step_s": STEP_S, "rounds": rounds, "rows": rows}


def table(data: dict) -> str:
    """The markdown table: median / p95 (ms) per call, server and client."""
    views = [v for v in ("server", "client") if any(v in r for r in data["rows"])]
    head = "| in flight | " + " | ".join(f"{op} ({v})" for op in OPS for v in views) + " |"
    rows = [head, "|---" * (1 + len(OPS) * len(views)) + "|"]
    for r in data["rows"]:
        cells = []
        for op in OPS:
            for v in views:
                s = stats(r.get(v, {}).get(op, []))
                cells.append(f"{s['median']:.2f} / {s['p95']:.2f}" if s["n"] else "-")
        rows.append(f"| {r['in_flight']:,} | " + " | ".join(cells) + " |")
    errors = [f"client view at {r['in_flight']:,} in flight: {r['client_error']}" for r in data["rows"] if "client_error" in r]
    if errors:
        rows += ["", *("Not measured: " + e for e in errors)]
    return "\n".join(rows)


def main() -> None:
    """Run figure 5 and write ``benchmarks/results/stub_scaling.json``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--rounds", type=int, default=rounds_default())
    parser.add_argument("--no-client", action="store_true", help="only the server view")
    args = parser.parse_args()
    stop_cleanly_on_sigterm()
    data = run(args.counts, args.rounds, client=not args.no_client)
    write_json("stub_scaling", data)
    print(table(data))


if __name__ == "__main__":
    main()
