"""Abort-until-idle across N stub engines: the client's own fan-out against smg's, side by side.

For each fleet size N, starts N stub engines (loopback, own processes) and one smg 1.13.0 with
``--enable-rl`` in front of them, then alternates the two ways for ``--rounds`` rounds: put
``--requests`` generations in flight on every stub, time ``Fleet(urls).abort_until_idle()`` or
``Fleet(gateway=smg).abort_until_idle()`` until every stub is idle. Prints a table of median and
worst times and the ratio. A benchmark, not a test: nothing is asserted.

    .venv/bin/python scripts/bench_gateway_abort.py --sizes 2 8 16 --rounds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import subprocess
import sys
import time
from typing import Iterator

import httpx

from engine_plugins.client import Fleet, ServerClient

KEY = "bench-key"


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, ok, deadline_s: float = 60.0) -> None:
    """Poll GET *url* until *ok(response)*; raise after *deadline_s*."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if ok(httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}, timeout=2)):
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready within {deadline_s} s")


@contextlib.contextmanager
def processes(commands: list[list[str]]) -> Iterator[None]:
    """Start every command (output discarded); always stop them."""
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in commands]
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


@contextlib.contextmanager
def fleet_of(n: int) -> Iterator[tuple[list[str], str]]:
    """N stubs and an smg in front of them: (stub URLs, smg URL)."""
    ports = [free_port() for _ in range(n)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    stubs = [[sys.executable, "-m", "engine_plugins.stub", "--port", str(p), "--api-key", KEY, "--step-s", "0.004"] for p in ports]
    with processes(stubs):
        for url in urls:
            wait_for(url + "/health", lambda r: r.status_code == 200)
        smg_port = free_port()
        smg = [sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(smg_port),
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), "--worker-urls", *urls,
               "--api-key", KEY, "--enable-rl", "--log-level", "warn"]
        gateway = f"http://127.0.0.1:{smg_port}"
        with processes([smg]):
            wait_for(gateway + "/v1/rl/workers",
                     lambda r: r.status_code == 200 and sum(w["health"] == "ready" for w in r.json()["workers"]) == n)
            yield urls, gateway


async def one_round(urls: list[str], fleet: Fleet, requests: int) -> float:
    """Seconds for *fleet* to abort until idle with *requests* in flight on every stub."""
    servers = [ServerClient(u, api_key=KEY) for u in urls]
    gens = [asyncio.create_task(s.partial_generate([1, 2, 3], {"max_new_tokens": 100_000}, f"b-{i}-{j}"))
            for i, s in enumerate(servers) for j in range(requests)]
    for s in servers:
        while (await s.loads()).in_flight < requests:
            await asyncio.sleep(0.005)
    started = time.perf_counter()
    result = await fleet.abort_until_idle(timeout_s=60)
    seconds = time.perf_counter() - started
    await asyncio.gather(*gens)
    for s in servers:
        await s.aclose()
    if not result.ok:
        raise RuntimeError(f"abort until idle failed: {result.to_dict()}")
    return seconds


async def bench(sizes: list[int], rounds: int, requests: int) -> None:
    rows = []
    for n in sizes:
        with fleet_of(n) as (urls, gateway):
            times: dict[str, list[float]] = {"client": [], "smg": []}
            async with Fleet(urls, api_key=KEY) as direct, Fleet(gateway=gateway, api_key=KEY) as via:
                for _ in range(rounds):  # alternate, so that both see the same machine
                    times["client"].append(await one_round(urls, direct, requests))
                    times["smg"].append(await one_round(urls, via, requests))
            rows.append((n, times))
    print(f"abort until idle, {requests} requests in flight on each stub, {rounds} rounds each (ms)")
    print(f"{'stubs':>5} | {'client median':>13} {'worst':>7} | {'smg median':>10} {'worst':>7} | smg/client")
    for n, t in rows:
        c, g = statistics.median(t["client"]) * 1000, statistics.median(t["smg"]) * 1000
        print(f"{n:>5} | {c:>13.1f} {max(t['client']) * 1000:>7.1f} | {g:>10.1f} {max(t['smg']) * 1000:>7.1f} | {g / c:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 16], help="fleet sizes (default 2 8 16)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds per way and size (default 10)")
    parser.add_argument("--requests", type=int, default=4, help="generations in flight on each stub (default 4)")
    args = parser.parse_args()
    asyncio.run(bench(args.sizes, args.rounds, args.requests))


if __name__ == "__main__":
    main()
