"""Figure 6: abort-until-idle across 1, 8, 64 and 256 stub servers on loopback, through the
client's fan-out (``Fleet(urls).abort_until_idle()``) and through smg 1.13.0 with
``--enable-rl`` in front of them (``Fleet(gateway=...)``), the two ways alternating round by round.

Each round puts ``--requests`` generations in flight on every stub (one step every
``STEP_S``), held by a process of their own (:mod:`benchmarks.hold_requests`), then times the
abort until every stub is idle (one step is the floor). The stubs run ``PER_PROCESS`` to a process (:mod:`benchmarks.stub_host`), so
on this two-core machine the fleet's servers share the cores with the client and smg: the
figure is the fan-out's cost as the fleet grows, relative to one server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
from typing import Iterator, Optional

import httpx

from engine_plugins.client import Fleet, ServerClient
from engine_plugins.launcher.engine_server import free_loopback_port

from .common import stop_cleanly_on_sigterm, KEY, REPO, ms, progress, rounds_default, stats, write_json
from .hold_requests import HeldRequests

PER_PROCESS = 32
SIZES = (1, 8, 64, 256)
# One step every 50 ms: 256 stubs with 4 requests each stepping every 4 ms (the stub's default)
# would take both cores by themselves, and the figure would time the stubs, not the fan-out.
STEP_S = 0.05


def _wait(url: str, ok, deadline_s: float = 120.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if ok(httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}, timeout=5)):
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} was not ready within {deadline_s} s")


@contextlib.contextmanager
def _processes(commands: list[list[str]]) -> Iterator[list[subprocess.Popen]]:
    procs = [subprocess.Popen(c, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in commands]
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


@contextlib.contextmanager
def fleet_of(n: int, with_smg: bool) -> Iterator[tuple[list[str], Optional[str]]]:
    """*n* stubs (and smg in front of them): (stub URLs, smg URL or None)."""
    ports: list[int] = []
    while len(ports) < n:  # distinct: the OS may hand a port that was just let go out again
        port = free_loopback_port()
        if port not in ports:
            ports.append(port)
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    hosts = [[sys.executable, "-m", "benchmarks.stub_host", "--step-s", str(STEP_S), *map(str, ports[i:i + PER_PROCESS])] for i in range(0, n, PER_PROCESS)]
    with _processes(hosts):
        for url in urls:
            _wait(url + "/health", lambda r: r.status_code == 200, 300)
        if not with_smg:
            yield urls, None
            return
        port = free_loopback_port()
        smg = [sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
               "--prometheus-port", str(free_loopback_port()), "--worker-urls", *urls, "--api-key", KEY, "--enable-rl", "--log-level", "warn"]
        gateway = f"http://127.0.0.1:{port}"
        with _processes([smg]):
            _wait(gateway + "/v1/rl/workers", lambda r: r.status_code == 200 and sum(w["health"] == "ready" for w in r.json()["workers"]) == n, 300)
            yield urls, gateway


async def one_round(servers: list[ServerClient], held: HeldRequests, fleet: Fleet, requests: int) -> tuple[float, float]:
    """Milliseconds for *fleet* to abort until idle with *requests* in flight on every stub, and
    the CPU milliseconds this (the calling) process spent on it."""
    await held.fill(requests)
    for s in servers:
        while (await s.loads()).in_flight < requests:
            await asyncio.sleep(0.01)
    start, cpu = time.perf_counter(), time.process_time()
    result = await fleet.abort_until_idle(timeout_s=120)
    took, cpu = ms(time.perf_counter() - start), ms(time.process_time() - cpu)
    if not result.ok:
        first = result.failed[0]
        raise RuntimeError(f"abort until idle failed on {len(result.failed)} of {len(servers)} servers, first {first.url}: {first.error}")
    return took, cpu


async def measure(urls: list[str], gateway: Optional[str], rounds: int, requests: int) -> dict[str, list[float]]:
    """Alternating rounds of both ways on one fleet."""
    # client_cpu: the client's own CPU time for its fan-out (the servers share the machine's
    # cores, so the wall time grows with their number even where the fan-out's cost does not).
    out: dict[str, list[float]] = {"client": [], "smg": [], "client_cpu": []}
    servers = [ServerClient(u, api_key=KEY) for u in urls]
    with HeldRequests(urls) as held:
        async with contextlib.AsyncExitStack() as stack:
            ways = {"client": await stack.enter_async_context(Fleet(urls, api_key=KEY))}
            if gateway:
                ways["smg"] = await stack.enter_async_context(Fleet(gateway=gateway, api_key=KEY))
            for _ in range(rounds):
                for name, fleet in ways.items():
                    took, cpu = await one_round(servers, held, fleet, requests)
                    out[name].append(took)
                    if name == "client":
                        out["client_cpu"].append(cpu)
            for s in servers:
                await s.aclose()
        answered, failed = held.close()
    if failed:
        raise RuntimeError(f"{failed} of the held requests failed ({answered} answered)")
    return out


def run(sizes: list[int], rounds: int, requests: int, with_smg: bool) -> dict:
    """Every fleet size; the raw data."""
    rows = []
    for n in sizes:
        progress(f"figure 6: {n} stub servers" + (" and smg" if with_smg else ""))
        try:
            with fleet_of(n, with_smg) as (urls, gateway):
                rows.append({"servers": n, **asyncio.run(measure(urls, gateway, rounds, requests))})
        except (RuntimeError, OSError, httpx.HTTPError) as exc:
            # Recorded in the table, and the sizes already measured are kept.
            rows.append({"servers": n, "client": [], "smg": [], "client_cpu": [], "error": f"{type(exc).__name__}: {exc}"[:2000]})
            progress(f"figure 6: {n} servers failed: {rows[-1]['error']}")
            continue
        progress(f"figure 6: {n} servers: client {stats(rows[-1]['client'])['median']:.0f} ms"
                 + (f", smg {stats(rows[-1]['smg'])['median']:.0f} ms" if rows[-1]["smg"] else ""))
    return {"figure": 6, "step_s": STEP_S, "rounds": rounds, "requests_per_server": requests, "per_process": PER_PROCESS, "rows": rows}


def table(data: dict) -> str:
    """Median / p95 (ms) and the multiple of one server, per way."""
    base = {w: stats(data["rows"][0][w]).get("median") for w in ("client", "smg")}
    out = ["| servers | client fan-out, median / p95 (ms) | x one server | client's CPU for it, median (ms) | through smg, median / p95 (ms) | x one server |",
           "|---|---|---|---|---|---|"]
    for r in data["rows"]:
        cells = []
        for w in ("client", "smg"):
            s = stats(r[w])
            cells += [f"{s['median']:.0f} / {s['p95']:.0f}", f"{s['median'] / base[w]:.2f}"] if s["n"] and base[w] else ["-", "-"]
            if w == "client":
                cpu = stats(r.get("client_cpu", []))
                cells.append(f"{cpu['median']:.0f}" if cpu["n"] else "-")
        out.append(f"| {r['servers']} | " + " | ".join(cells) + " |")
    out += [f"\nNot measured at {r['servers']} servers: {r['error']}" for r in data["rows"] if r.get("error")]
    return "\n".join(out)


def main() -> None:
    """Run figure 6; writes ``benchmarks/results/fleets.json``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=rounds_default())
    parser.add_argument("--requests", type=int, default=4, help="generations in flight on each stub")
    parser.add_argument("--no-smg", action="store_true")
    args = parser.parse_args()
    stop_cleanly_on_sigterm()
    data = run(args.sizes, args.rounds, args.requests, not args.no_smg)
    write_json("fleets", data)
    print(table(data))


if __name__ == "__main__":
    main()
