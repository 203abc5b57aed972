"""Measures how a real engine under load shares this machine's cores with the client driving it.

    .venv/bin/python -m scripts.cpu_contention --engine vllm [--profile NAME] [--rounds 3] [--requests 32]

For each round: opens the connections, sends N ``/partial_generate`` requests, polls ``/v1/loads``
until all N run, keeps polling for a few seconds, then aborts all with wait. It reports the time
until all N run, the latency of each ``/v1/loads`` call under load, the client's event-loop lag
(how late a 10 ms sleep wakes up: a stalled client), and for every process of the server which
core it ran on and how much CPU it took. ``--profile`` picks the CPU settings the launcher uses
(``tools.launcher.cpu``); ``--env K=V`` adds variables on top, to try one change at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

import httpx

from tools.launcher.engine_server import EngineServer, ensure_engine

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def group_threads(pgid: int) -> dict[tuple[int, int], tuple[str, int, int]]:
    """(pid, tid) -> (process name, last core, utime+stime ticks) for every thread in the group."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            if int(stat[stat.rfind(b")") + 2 :].split()[2]) != pgid:
                continue
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            for tid in os.listdir(f"/proc/{pid}/task"):
                t = Path(f"/proc/{pid}/task/{tid}/stat").read_bytes()
                fields = t[t.rfind(b")") + 2 :].split()
                # fields[0] is state (field 3); utime is field 14, stime 15, processor 39.
                out[(int(pid), int(tid))] = (name, int(fields[36]), int(fields[11]) + int(fields[12]))
        except (OSError, IndexError, ValueError):
            continue
    return out


def cpu_by_process(before: dict, after: dict, seconds: float) -> dict[str, dict]:
    """CPU share (1.0 = one core) per process name and per core, between two samples."""
    usage: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    for key, (name, core, ticks) in after.items():
        delta = ticks - before.get(key, (name, core, 0))[2]
        if delta > 0:
            usage[f"{name}[{key[0]}]"][f"core{core}"] += delta / CLK_TCK / seconds
    return {proc: {c: round(v, 2) for c, v in cores.items()} for proc, cores in usage.items()}


def self_cpu(seconds: float, before: float) -> float:
    """This client's own CPU share since `before` (process time)."""
    return round((time.process_time() - before) / seconds, 2)


async def lag_monitor(samples: list[float], stop: asyncio.Event) -> None:
    """Records how late each 10 ms sleep wakes up."""
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(0.01)
        samples.append(time.monotonic() - t - 0.01)


def pct(values: list[float], q: float) -> float:
    """The q-quantile of values (ms), 0 for none."""
    if not values:
        return 0.0
    values = sorted(values)
    return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 1)


async def one_round(url: str, key: str, n: int, tokens: int, pgid: int, hold_s: float) -> dict:
    """One burst of n requests; returns the round's measurements."""
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300, limits=limits) as http:
        await asyncio.gather(*(http.get("/is_paused") for _ in range(n)))
        lags: list[float] = []
        stop = asyncio.Event()
        monitor = asyncio.create_task(lag_monitor(lags, stop))
        body = lambda i: {"input_ids": [1, 15, 27, 33, 41], "request_id": f"m-{i}",
                          "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
        t0 = time.monotonic()
        gens = [asyncio.create_task(http.post("/partial_generate", json=body(i))) for i in range(n)]
        load_latency: list[float] = []
        all_running_s = None
        threads0, cpu0, wall0 = group_threads(pgid), time.process_time(), time.monotonic()
        while time.monotonic() - t0 < 60:
            t = time.monotonic()
            loads = (await http.get("/v1/loads")).json()
            load_latency.append(time.monotonic() - t)
            if all_running_s is None and loads["aggregate"]["total_running_reqs"] >= n:
                all_running_s = time.monotonic() - t0
            if all_running_s is not None and time.monotonic() - t0 > all_running_s + hold_s:
                break
            if all(g.done() for g in gens):
                break
            await asyncio.sleep(0.02)
        seconds = time.monotonic() - wall0
        cpu = cpu_by_process(threads0, group_threads(pgid), seconds)
        client_cpu = self_cpu(seconds, cpu0)
        t = time.monotonic()
        aborted = (await http.post("/abort_requests", json={"wait": True})).json()
        abort_s = time.monotonic() - t
        results = [(await g).json() for g in gens]
        stop.set()
        await monitor
    tokens_out = [len(r.get("output_ids", [])) for r in results]
    return {
        "all_running_s": None if all_running_s is None else round(all_running_s, 2),
        "finished_before_running": sum(1 for r in results if r.get("finish_reason") == "length"),
        "loads_calls": len(load_latency),
        "loads_ms_p50": pct(load_latency, 0.5), "loads_ms_p95": pct(load_latency, 0.95),
        "loads_ms_max": pct(load_latency, 1.0),
        "loop_lag_ms_p95": pct(lags, 0.95), "loop_lag_ms_max": pct(lags, 1.0),
        "abort_wait_s": round(abort_s, 3), "aborted": aborted.get("aborted"),
        "tokens_median": statistics.median(tokens_out) if tokens_out else 0,
        "client_cpu": client_cpu, "server_cpu": cpu,
    }


def main() -> None:
    """Parses the flags, starts the engine, runs the rounds, prints one JSON object."""
    from tools.launcher import cpu

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    parser.add_argument("--profile", choices=sorted(cpu.PROFILES), default=cpu.DEFAULT_PROFILE)
    parser.add_argument("--env", action="append", default=[], help="K=V added to the server's environment")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=1500)
    parser.add_argument("--hold-s", type=float, default=3.0, help="keep polling this long once all run")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    ensure_engine(args.engine, REPO)
    client_cores = cpu.PROFILES[args.profile].place_client()
    key = "contention-key"
    server = EngineServer(args.engine, REPO, api_key=key, env=extra, cpu_profile=args.profile)
    with server:
        rounds = [asyncio.run(one_round(server.url, key, args.requests, args.tokens, server.process.pid, args.hold_s))
                  for _ in range(args.rounds)]
        binding = [line.strip() for line in server.log_tail(400).splitlines() if "OpenMP" in line or "core ids" in line]
    print(json.dumps({"engine": args.engine, "profile": args.profile, "env": extra, "client_cores": sorted(client_cores or []), "startup_s": round(server.startup_seconds, 1),
                      "binding_log": binding[:4], "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
