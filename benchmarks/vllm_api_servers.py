"""Abort-to-idle and loads on a real vLLM with one API server process and with two, side by side
in one run (the plugin loaded in both; both servers up at once and the rounds alternating
between them, so that both see the same machine):

- **abort to idle**: N long ``/partial_generate`` requests, each on a connection of its own (so
  that with two processes they spread over both), all running; then ``POST /abort_requests
  {"wait": true}`` on a new connection. Timed: the abort's answer (every covered request released
  on every process), and the last client's answer.
- **loads**: ``GET /v1/loads`` on a new connection each, with the N requests running.
- **one short request**: a ``/partial_generate`` of one token with its own ``request_id`` (which
  the other processes are asked about while it starts), on an idle server.

Run it with no other engine on the machine (it starts its own):

    nice -n 5 .venv/bin/python -m benchmarks.vllm_api_servers --rounds 10

It prints a markdown table (medians and p95 in ms, and the two-process figure as a multiple of
one process) and writes the raw figures to ``benchmarks/results/vllm_api_servers.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time

import httpx

from tools.launcher.engine_server import EngineServer, ensure_engine

from .common import REPO, RESULTS, in_turn, p95

KEY = "timing-key"


async def call(url: str, method: str, path: str, body: object = None) -> httpx.Response:
    """One call on a new connection."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300) as http:
        response = await http.request(method, path, json=body)
    response.raise_for_status()
    return response


async def running(url: str, n: int) -> None:
    """Wait until *n* requests run."""
    deadline = time.monotonic() + 120
    while (await call(url, "GET", "/v1/loads")).json()["aggregate"]["total_running_reqs"] < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} requests did not all run within 120 s")
        await asyncio.sleep(0.05)


async def one_round(url: str, n: int, loads_calls: int) -> dict:
    """Time a short request on the idle server; start *n* requests, time loads while they run,
    then time an abort with wait."""
    short_ms = []
    for i in range(3):
        start = time.perf_counter()
        await call(url, "POST", "/partial_generate", {"input_ids": [1, 15, 27], "request_id": f"short-{time.time_ns()}-{i}",
                                                      "sampling_params": {"max_new_tokens": 1}})
        short_ms.append((time.perf_counter() - start) * 1000)
    body = {"input_ids": [1, 15, 27, 33, 41], "sampling_params": {"max_new_tokens": 1500, "ignore_eos": True}}
    tasks = [asyncio.create_task(call(url, "POST", "/partial_generate", body)) for _ in range(n)]
    await running(url, n)
    loads_ms = []
    for _ in range(loads_calls):
        start = time.perf_counter()
        await call(url, "GET", "/v1/loads")
        loads_ms.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    abort = await call(url, "POST", "/abort_requests", {"wait": True})
    abort_ms = (time.perf_counter() - start) * 1000
    answers = await asyncio.gather(*tasks)
    last_ms = (time.perf_counter() - start) * 1000
    processes = {r.headers.get("engine-plugins-api-server", "0/1") for r in answers}
    result = abort.json()
    if not (result["idle"] and result["aborted"] == n):
        raise RuntimeError(f"the abort did not cover the {n} requests: {result}")
    return {"abort_ms": abort_ms, "last_answer_ms": last_ms, "loads_ms": loads_ms, "short_ms": short_ms,
            "processes": sorted(processes)}


async def measure(urls: dict[int, str], rounds: int, n: int, loads_calls: int) -> list[dict]:
    """Every round on each server (by its number of API processes), the order alternating."""
    for url in urls.values():
        await one_round(url, n, 2)  # warm-up, not counted
    results: dict[int, list[dict]] = {api_servers: [] for api_servers in urls}
    for i in range(rounds):
        for api_servers in in_turn(list(urls), i):
            results[api_servers].append(await one_round(urls[api_servers], n, loads_calls))
            print(f"  {api_servers} API process(es), round {i + 1}/{rounds}: abort {results[api_servers][-1]['abort_ms']:.0f} ms", flush=True)
    return [{"api_servers": api_servers, "rounds": rounds_of} for api_servers, rounds_of in results.items()]


def summary(runs: list[dict]) -> str:
    """The markdown table of medians and p95, and each figure against one process."""
    rows = ["| API processes | abort with wait, median / p95 (ms) | last client's answer (ms) | loads, median / p95 (ms) "
            "| one short request (ms) | requests ran on |",
            "|---|---|---|---|---|---|"]
    base = None
    for run in runs:
        abort = [r["abort_ms"] for r in run["rounds"]]
        last = [r["last_answer_ms"] for r in run["rounds"]]
        loads = [x for r in run["rounds"] for x in r["loads_ms"]]
        short = [x for r in run["rounds"] for x in r["short_ms"]]
        figures = (statistics.median(abort), statistics.median(last), statistics.median(loads), statistics.median(short))
        base = base or figures
        ratio = " (x{:.2f})"
        spread = sorted({p for r in run["rounds"] for p in r["processes"]})
        rows.append(
            f"| {run['api_servers']} | {figures[0]:.0f}{ratio.format(figures[0] / base[0])} / {p95(abort):.0f} "
            f"| {figures[1]:.0f}{ratio.format(figures[1] / base[1])} "
            f"| {figures[2]:.1f}{ratio.format(figures[2] / base[2])} / {p95(loads):.1f} "
            f"| {figures[3]:.1f}{ratio.format(figures[3] / base[3])} | {', '.join(spread)} |"
        )
    return "\n".join(rows)


def run(rounds: int, requests: int = 16, loads_calls: int = 10) -> dict:
    """Measure one API process and two, alternating (figure 7 of ``make bench``); the raw figures."""
    ensure_engine("vllm", REPO)
    with contextlib.ExitStack() as servers:
        urls = {}
        for api_servers in (1, 2):
            extra = ["--api-server-count", str(api_servers)] if api_servers > 1 else []
            server = EngineServer("vllm", REPO, api_key=KEY, env={"VLLM_PLUGINS": "engine_plugins"}, extra_args=extra)
            urls[api_servers] = servers.enter_context(server).url
        print(f"vLLM with 1 API process at {urls[1]}, with 2 at {urls[2]}", flush=True)
        runs = asyncio.run(measure(urls, rounds, requests, loads_calls))
    return {"requests": requests, "alternating": True, "runs": runs}


def main() -> None:
    """Measure one API process and two; print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--loads-calls", type=int, default=10, help="GET /v1/loads calls per round")
    args = parser.parse_args()
    data = run(args.rounds, args.requests, args.loads_calls)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "vllm_api_servers.json").write_text(json.dumps(data, indent=1))
    print(summary(data["runs"]))


if __name__ == "__main__":
    main()
