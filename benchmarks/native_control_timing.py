"""Times two of SGLang's own control calls, made exactly as the frameworks make them, on a real
SGLang with and without the plugin, side by side in one run:

- slime's unmodified abort loop (``slime/backends/sglang_utils/server_control.py``, THUDM/slime
  at 624b824a): ``POST /abort_request {"abort_all": true}``, ``GET /v1/loads?include=core``,
  sleep 3 s while the count is not 0;
- SGLang's abort-mode pause as AReaL sends it: ``POST /pause_generation {}`` (then
  ``/continue_generation {}``, not timed).

Each round starts N long native ``/generate`` requests, waits until they all run (SGLang's own
``/v1/loads``), then times the call. Run it with no other engine on the machine (it starts its
own, and timings are side by side only within one run):

    nice -n 5 .venv/bin/python -m benchmarks.native_control_timing --rounds 5

It prints one line per server and call: the median and the spread of the rounds, and for the
loop how many abort rounds it took.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from .real_engines import num_requests_from_load

REPO = Path(__file__).resolve().parent.parent
KEY = "timing-key"


async def slime_abort_loop(http: httpx.AsyncClient) -> int:
    """slime's ``abort_server_until_idle``; the number of rounds."""
    attempt = 1
    while True:
        await http.post("/abort_request", json={"abort_all": True})
        if num_requests_from_load((await http.get("/v1/loads?include=core")).json()) <= 0:
            return attempt
        await asyncio.sleep(3)
        attempt += 1


async def areal_pause(http: httpx.AsyncClient) -> int:
    """AReaL's ``POST /pause_generation {}`` (SGLang's abort mode); 1 round."""
    (await http.post("/pause_generation", json={})).raise_for_status()
    return 1


async def start_requests(http: httpx.AsyncClient, n: int) -> list[asyncio.Task]:
    """N long native /generate requests, returned once all run."""
    body = {"input_ids": [1, 15, 27, 33, 41], "return_logprob": True,
            "sampling_params": {"max_new_tokens": 1500, "ignore_eos": True}}
    tasks = [asyncio.create_task(http.post("/generate", json=body)) for _ in range(n)]
    deadline = time.monotonic() + 120
    while True:
        loads = (await http.get("/v1/loads?include=core")).json()["loads"]
        if sum(r.get("num_running_reqs", 0) for r in loads) >= n:
            return tasks
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} requests never all ran: {loads}")
        await asyncio.sleep(0.02)


async def measure(url: str, rounds: int, n: int) -> dict[str, list[tuple[float, int]]]:
    """Time each call *rounds* times on the server at *url*."""
    out: dict[str, list[tuple[float, int]]] = {"slime abort loop": [], "abort-mode pause": []}
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300) as http:
        for _ in range(rounds):
            for name, call in (("slime abort loop", slime_abort_loop), ("abort-mode pause", areal_pause)):
                tasks = await start_requests(http, n)
                started = time.perf_counter()
                steps = await call(http)
                out[name].append((time.perf_counter() - started, steps))
                await asyncio.gather(*tasks)
                if name == "abort-mode pause":
                    (await http.post("/continue_generation", json={})).raise_for_status()
    return out


def main() -> None:
    """Start SGLang with the plugin and without it, one after the other, and time both."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=8)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tools.launcher.engine_server import EngineServer, ensure_engine

    ensure_engine("sglang", REPO)
    results = {}
    # SGLANG_PLUGINS is SGLang's allowlist of plugins: naming none other keeps this one out.
    for label, env in (("with the plugin", {}), ("without the plugin", {"SGLANG_PLUGINS": "no_such_plugin"})):
        with EngineServer("sglang", REPO, api_key=KEY, env=env) as server:
            results[label] = asyncio.run(measure(server.url, args.rounds, args.requests))
    print(f"SGLang, {args.requests} running requests, {args.rounds} rounds each (seconds: median [min-max]; rounds of the loop)")
    for label, calls in results.items():
        for name, samples in calls.items():
            times = [t for t, _ in samples]
            steps = sorted({s for _, s in samples})
            print(f"  {label:20s} {name:18s} {statistics.median(times):7.3f} [{min(times):.3f}-{max(times):.3f}]  rounds {steps}")


if __name__ == "__main__":
    main()
