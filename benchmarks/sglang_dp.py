"""SGLang with one rank and with two (``--dp-size 2``), side by side in one run: the contract's
abort with wait of in-flight requests until idle, and ``GET /v1/loads``.

It starts a real SGLang with the plugin (the launcher's settings, as the tests use them) with one
rank, measures, stops it, then the same with two ranks (SGLang's data-parallel controller in
front of two schedulers, one core each), and measures again. Each round starts N long
``/partial_generate`` requests, waits until all run, times M ``GET /v1/loads`` calls while they
run, then times ``POST /abort_requests {"wait": true}`` until its answer (which must say idle).
Between the servers it also reads how busy each SGLang process is while the server is idle (CPU
seconds per second, from ``/proc``): SGLang's DP controller polls its socket for ever unless the
plugin lets it sleep (docs/engine-notes.md).

Run it with no other engine on the machine (it starts its own; timings compare only within one
run):

    nice -n 5 .venv/bin/python -m benchmarks.sglang_dp --rounds 12

It prints a markdown table (median and p95 in milliseconds) and writes the samples as JSON to
``benchmarks/results/sglang_dp-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

import httpx

from .common import REPO, RESULTS, cpu_seconds, group_processes

KEY = "timing-key"
LONG_TOKENS = 1500
# Seconds over which the idle CPU use of each SGLang process is read.
IDLE_WINDOW_S = 3.0


def percentile(samples: list[float], q: float) -> float:
    """The *q*-th percentile (0-100) by linear interpolation between the closest ranks."""
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0]
    k = (len(ordered) - 1) * q / 100
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


async def start_running(http: httpx.AsyncClient, n: int, prefix: str) -> list[asyncio.Task]:
    """N long ``/partial_generate`` requests, returned once every one of them runs."""
    body = {"input_ids": [1, 15, 27, 33, 41], "sampling_params": {"max_new_tokens": LONG_TOKENS, "ignore_eos": True}}
    tasks = [asyncio.create_task(http.post("/partial_generate", json={**body, "request_id": f"{prefix}-{i}"})) for i in range(n)]
    deadline = time.monotonic() + 120
    while (await http.get("/v1/loads")).json()["aggregate"]["total_running_reqs"] < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} requests were not all running within 120 s")
        await asyncio.sleep(0.02)
    return tasks


async def measure(url: str, rounds: int, n: int, loads_calls: int) -> dict[str, list[float]]:
    """*rounds* rounds on the server at *url*: seconds of each loads call and of each abort."""
    out: dict[str, list[float]] = {"abort_wait_idle_s": [], "loads_s": [], "ranks": []}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300, limits=limits) as http:
        await asyncio.gather(*(http.get("/is_paused") for _ in range(n + 2)))  # open the connections first
        for number in range(rounds):
            tasks = await start_running(http, n, f"bench-{number}")
            for _ in range(loads_calls):
                started = time.perf_counter()
                loads = (await http.get("/v1/loads")).raise_for_status().json()
                out["loads_s"].append(time.perf_counter() - started)
            out["ranks"].append(len(loads["loads"]))
            started = time.perf_counter()
            answer = (await http.post("/abort_requests", json={"wait": True})).raise_for_status().json()
            out["abort_wait_idle_s"].append(time.perf_counter() - started)
            if not answer["idle"]:
                raise RuntimeError(f"the abort with wait did not leave the server idle: {answer}")
            await asyncio.gather(*tasks)
    return out


def idle_cpu(pgid: int, window_s: float = IDLE_WINDOW_S) -> dict[str, float]:
    """CPU seconds per second of each process of the idle server, by process title."""
    processes = group_processes(pgid)
    before = {pid: cpu_seconds(pid) for pid in processes}
    time.sleep(window_s)
    use: dict[str, float] = {}
    for pid, title in processes.items():
        try:
            share = (cpu_seconds(pid) - before[pid]) / window_s
        except OSError:
            continue
        use[f"{title} [{pid}]"] = round(share, 3)
    return use


def summary(samples: list[float]) -> tuple[float, float]:
    """Median and p95, in milliseconds."""
    return statistics.median(samples) * 1000, percentile(samples, 95) * 1000


def main() -> None:
    """Start SGLang with one rank, then with two, and measure both."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--loads-calls", type=int, default=5, help="GET /v1/loads calls per round, while the requests run")
    parser.add_argument("--label", default="", help="a note stored with the results (e.g. what was changed)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from tools.launcher.engine_server import EngineServer, ensure_engine
    import targets  # noqa: F401  (first: it imports every targets_<engine> module itself)
    from targets_sglang import SGLANG_ARGS, dp_threads_bind

    ensure_engine("sglang", REPO)
    configs = {
        "1 rank": ([*SGLANG_ARGS], {}),
        "2 ranks (--dp-size 2)": ([*SGLANG_ARGS, "--dp-size", "2"], {"SGLANG_CPU_OMP_THREADS_BIND": dp_threads_bind(2)}),
    }
    results: dict[str, Any] = {}
    for label, (extra, env) in configs.items():
        with EngineServer("sglang", REPO, api_key=KEY, extra_args=extra, env=env) as server:
            assert server.process is not None
            time.sleep(2)  # startup's last work settles before the idle reading
            cpu = idle_cpu(server.process.pid)
            samples = asyncio.run(measure(server.url, args.rounds, args.requests, args.loads_calls))
            results[label] = {**samples, "idle_cpu_s_per_s": cpu, "startup_s": server.startup_seconds}
    one = results["1 rank"]
    print(f"\nSGLang, {args.requests} running requests, {args.rounds} rounds ({args.loads_calls} loads calls each); milliseconds\n")
    print("| server | ranks in /v1/loads | abort wait -> idle, median | p95 | GET /v1/loads, median | p95 | abort vs 1 rank |")
    print("|---|---|---|---|---|---|---|")
    for label, data in results.items():
        abort_median, abort_p95 = summary(data["abort_wait_idle_s"])
        loads_median, loads_p95 = summary(data["loads_s"])
        ratio = abort_median / summary(one["abort_wait_idle_s"])[0]
        print(f"| {label} | {sorted(set(data['ranks']))} | {abort_median:.1f} | {abort_p95:.1f} | {loads_median:.1f} | {loads_p95:.1f} | {ratio:.2f}x |")
    print("\nIdle CPU use (CPU seconds per second) of each process:")
    for label, data in results.items():
        busy = {title: share for title, share in data["idle_cpu_s_per_s"].items() if share >= 0.01}
        print(f"- {label}: {busy or 'every process below 0.01'}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"sglang_dp-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"label": args.label, "args": vars(args), "results": results}, indent=1))
    print(f"\nsamples: {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
