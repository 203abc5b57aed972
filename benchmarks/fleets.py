"""Figure 6: abort-until-idle across 1, 8, 64 and 256 stub servers on loopback, through the
client's fan-out (``Fleet(urls).abort_until_idle()``) and through smg 1.13.0 with
``--enable-rl`` in front of them (``Fleet(gateway=...)``), the two ways alternating round by round.

Each round puts ``--requests`` generations in flight on every stub (one step every
``STEP_S``), held by a process of their own (:mod:`benchmarks.hold_requests`), then times the
abort until every stub is idle (one step is the floor). The stubs run ``PER_PROCESS`` to a
process (:mod:`benchmarks.stub_host`), so on this two-core machine the fleet's servers share the
cores with the client and smg: the figure is the fan-out's cost as the fleet grows, relative to
one server, with the CPU time each round took in the client, in smg and in the stubs' processes,
which says where that time went, and the client's own CPU per server (its median round over the
number of servers), which is what the client's fan-out costs as the fleet grows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import httpx

from engine_plugins.client import Fleet, FleetLike, ServerClient
from tools.launcher.spawn import ServerProcess, free_loopback_port

from .common import cpu_seconds, stop_cleanly_on_sigterm, KEY, REPO, ms, progress, rounds_default, server_log, stats, write_json
from .hold_requests import HeldRequests

PER_PROCESS = 32
SIZES = (1, 8, 64, 256)
# One step every 50 ms: 256 stubs with 4 requests each stepping every 4 ms (the stub's default)
# would take both cores by themselves, and the figure would time the stubs, not the fan-out.
STEP_S = 0.05


HEADERS = {"Authorization": f"Bearer {KEY}"}
# A fleet of 256 stubs shares two cores with smg: its start takes a while.
START_TIMEOUT_S = 300.0


def all_healthy(urls: list[str]) -> Callable[[ServerProcess], bool]:
    """Readiness of a stub host: every one of its stubs answers GET /health."""
    return lambda _: all(httpx.get(u + "/health", headers=HEADERS, timeout=5).status_code == 200 for u in urls)


def lists_ready(n: int) -> Callable[[ServerProcess], bool]:
    """Readiness of smg: its discovery lists *n* workers ready."""

    def ready(smg: ServerProcess) -> bool:
        answer = httpx.get(smg.url + "/v1/rl/workers", headers=HEADERS, timeout=5)
        return answer.status_code == 200 and sum(w["health"] == "ready" for w in answer.json()["workers"]) == n

    return ready


@dataclass
class FleetUnderTest:
    """The stubs' URLs, smg's (or None), and the pids whose CPU time a round reads."""

    urls: list[str]
    gateway: Optional[str]
    stub_pids: list[int]
    smg_pid: Optional[int] = None


@contextlib.contextmanager
def fleet_of(n: int, with_smg: bool) -> Iterator[FleetUnderTest]:
    """*n* stubs (and smg in front of them)."""
    ports: list[int] = []
    while len(ports) < n:  # distinct: the OS may hand a port that was just let go out again
        port = free_loopback_port()
        if port not in ports:
            ports.append(port)
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    with contextlib.ExitStack() as stack:
        stubs = [ServerProcess([sys.executable, "-m", "benchmarks.stub_host", "--step-s", str(STEP_S), *map(str, ports[i:i + PER_PROCESS])],
                               port=ports[i], log_path=server_log("stub-host"), cwd=REPO, name="stub host", stop_grace=15,
                               ready=all_healthy(urls[i:i + PER_PROCESS]), start_timeout=START_TIMEOUT_S)
                 for i in range(0, n, PER_PROCESS)]
        for stub in stubs:
            stack.callback(stub.stop)
        # All at once, from threads: a server outlives the thread that started it.
        with ThreadPoolExecutor(len(stubs)) as pool:
            list(pool.map(ServerProcess.start, stubs))
        if not with_smg:
            yield FleetUnderTest(urls, None, [p.pid for p in stubs])
            return

        def smg(port: int) -> list[str]:
            return [sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
                    "--prometheus-port", str(free_loopback_port()), "--worker-urls", *urls, "--api-key", KEY, "--enable-rl", "--log-level", "warn"]

        gateway = stack.enter_context(ServerProcess(smg, log_path=server_log("smg"), cwd=REPO, name="smg", stop_grace=15,
                                                    ready=lists_ready(n), start_timeout=START_TIMEOUT_S))
        yield FleetUnderTest(urls, gateway.url, [p.pid for p in stubs], gateway.pid)


async def one_round(servers: list[ServerClient], held: HeldRequests, fleet: FleetLike, requests: int, pids: dict[str, list[int]]) -> dict[str, float]:
    """Milliseconds for *fleet* to abort until idle with *requests* in flight on every stub
    (``ms``), and the CPU milliseconds each group of *pids* spent meanwhile (``<name>_cpu``;
    ``client_cpu`` is this process's)."""
    await held.fill(requests)
    for s in servers:
        while (await s.loads()).in_flight < requests:
            await asyncio.sleep(0.01)
    before = {name: sum(map(cpu_seconds, group)) for name, group in pids.items()}
    # This process's own from the kernel's exact count: /proc counts whole ticks (10 ms), more
    # than the whole round takes at a few servers.
    client_before = time.process_time()
    start = time.perf_counter()
    result = await fleet.abort_until_idle(timeout_s=120)
    took = ms(time.perf_counter() - start)
    client_cpu = ms(time.process_time() - client_before)
    cpu = {f"{name}_cpu": ms(sum(map(cpu_seconds, group)) - before[name]) for name, group in pids.items()}
    cpu["client_cpu"] = client_cpu
    if not result.ok:
        first = result.failed[0]
        raise RuntimeError(f"abort until idle failed on {len(result.failed)} of {len(servers)} servers, first {first.url}: {first.error}")
    return {"ms": took, **cpu}


async def measure(fleet_under_test: FleetUnderTest, rounds: int, requests: int) -> dict[str, list[dict[str, float]]]:
    """Alternating rounds of both ways on one fleet: per way, each round's :func:`one_round`."""
    # The CPU times say where the wall time went: the stubs share the machine's two cores with
    # the client and smg, so the wall time grows with their number even where the fan-out's own
    # cost does not.
    urls, gateway = fleet_under_test.urls, fleet_under_test.gateway
    out: dict[str, list[dict[str, float]]] = {"client": [], "smg": []}
    pids = {"stubs": fleet_under_test.stub_pids}
    if fleet_under_test.smg_pid is not None:
        pids["smg"] = [fleet_under_test.smg_pid]
    servers = [ServerClient(u, api_key=KEY) for u in urls]
    with HeldRequests(urls) as held:
        async with contextlib.AsyncExitStack() as stack:
            ways = {"client": await stack.enter_async_context(Fleet(urls, api_key=KEY))}
            if gateway:
                ways["smg"] = await stack.enter_async_context(Fleet(gateway=gateway, api_key=KEY))
            for _ in range(rounds):
                for name, fleet in ways.items():
                    out[name].append(await one_round(servers, held, fleet, requests, pids))
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
            with fleet_of(n, with_smg) as fleet_under_test:
                rows.append({"servers": n, **asyncio.run(measure(fleet_under_test, rounds, requests))})
        except (RuntimeError, OSError, httpx.HTTPError) as exc:
            # Recorded in the table, and the sizes already measured are kept.
            rows.append({"servers": n, "client": [], "smg": [], "error": f"{type(exc).__name__}: {exc}"[:2000]})
            progress(f"figure 6: {n} servers failed: {rows[-1]['error']}")
            continue
        per_server = client_cpu_per_server(rows[-1])
        progress(f"figure 6: {n} servers: client {stats(series(rows[-1]['client']))['median']:.0f} ms"
                 + (f" ({per_server:.2f} ms of client CPU per server)" if per_server is not None else "")
                 + (f", smg {stats(series(rows[-1]['smg']))['median']:.0f} ms" if rows[-1]["smg"] else ""))
    return {"figure": 6, "step_s": STEP_S, "rounds": rounds, "requests_per_server": requests, "per_process": PER_PROCESS, "rows": rows}


def series(rounds: list[dict[str, float]], key: str = "ms") -> list[float]:
    """One measure (``ms``, ``client_cpu``, ``stubs_cpu``, ``smg_cpu``) of every round."""
    return [r[key] for r in rounds if key in r]


def client_cpu_per_server(row: dict) -> Optional[float]:
    """The client's own CPU per server for one abort until idle: the median round's client CPU
    (ms) over the number of servers; None when not measured."""
    cpu = stats(series(row["client"], "client_cpu"))
    return cpu["median"] / row["servers"] if cpu["n"] else None


def table(data: dict) -> str:
    """Per way: median / p95 (ms), the multiple of one server, and the median CPU times; for the
    client's fan-out also its CPU per server."""
    base = {w: stats(series(data["rows"][0][w])).get("median") for w in ("client", "smg")}
    cpus = {"client": ("client", "stubs"), "smg": ("smg", "stubs")}
    out = ["| servers | client fan-out, median / p95 (ms) | x one server | CPU: client / stubs (ms) | client CPU per server (ms) "
           "| through smg, median / p95 (ms) | x one server | CPU: smg / stubs (ms) |",
           "|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        cells = []
        for w in ("client", "smg"):
            s = stats(series(r[w]))
            cells += [f"{s['median']:.0f} / {s['p95']:.0f}", f"{s['median'] / base[w]:.2f}"] if s["n"] and base[w] else ["-", "-"]
            cpu = [stats(series(r[w], f"{who}_cpu")) for who in cpus[w]]
            cells.append(" / ".join(f"{c['median']:.0f}" for c in cpu) if all(c["n"] for c in cpu) else "-")
            if w == "client":
                per_server = client_cpu_per_server(r)
                cells.append(f"{per_server:.2f}" if per_server is not None else "-")
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
