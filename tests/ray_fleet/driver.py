"""A framework's Ray driver over engines held in-process by Ray actors, driven with
``Fleet([handle, ...])``: run in an engine's interpreter, with Ray on its path.

    python -m ray_fleet.driver --engine stub|vllm|sglang [--actors N] [--model DIR]
        [--load-format auto] [--reload-from DIR] --out report.json

It starts a Ray cluster of its own (:func:`frameworks.ray_host.start_ray`), creates *N* named
actors (``<engine>-<i>``) holding the engine (:mod:`ray_fleet.actors`; for the stub, the second one
by ``with_contract`` on a class without the mixin), then through one fleet of their handles:
detects them, reads their loads, runs the partial-rollout scenario (:mod:`ray_fleet.scenario`)
with the weights loaded by the engine's own reload from *--reload-from* (version-only without
it), and, for the stub, kills one actor and reads the loads again (that one ``unreachable``, the
others answering). Writes a JSON report to *--out*; exit 0 when it has no problems.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional

from engine_plugins.client import Fleet, ServerClient
from engine_plugins.inprocess import with_contract

from frameworks.ray_host import start_ray
from ray_fleet.actors import ACTORS, FrameworkStubActor
from ray_fleet.scenario import SIZES, run_scenario, version_only



def make_actors(ray: Any, engine: str, n: int, model: Optional[str], load_format: str) -> list[Any]:
    """*n* named actors holding *engine*, started (their engines made)."""
    handles = []
    for i in range(n):
        if engine == "stub":
            cls, args = (ACTORS["stub"] if i % 2 == 0 else with_contract(FrameworkStubActor, engine="llm")), ()
        else:
            cls, args = ACTORS[engine], (model, load_format)
        # num_cpus=0: two cores hold the driver, the actors and the engines' own processes.
        handles.append(ray.remote(num_cpus=0)(cls).options(name=f"{engine}-{i}").remote(*args))
    ray.get([h.start.remote() for h in handles], timeout=900)
    return handles


async def drive(ray: Any, engine: str, handles: list[Any], reload_from: Optional[str]) -> dict[str, Any]:
    """Everything the driver checks, through one fleet of *handles*."""
    report: dict[str, Any] = {"engine": engine, "problems": []}
    problems = report["problems"]

    async def load(server: ServerClient) -> str:
        if reload_from is None:
            return await version_only(server)
        # The engine's own reload, an actor method the framework's trainer calls beside the fleet.
        return await server.transport.handle.reload_weights.remote(reload_from)

    async with Fleet(handles) as fleet:
        report["names"] = [s.url for s in fleet.servers]
        if report["names"] != [f"ray://{engine}-{i}" for i in range(len(handles))]:
            problems.append(f"the servers are named {report['names']}, not by their actors' names")
        detected = await fleet.detect()
        report["detect"] = detected.to_dict()
        if not detected.ok or {r.value.engine for r in detected.results} != {engine}:
            problems.append(f"detection: {detected.to_dict()}")
        per_server, tokens, settle_s = SIZES[engine]
        scenario = await run_scenario(fleet, load, per_server=per_server, max_new_tokens=tokens, settle_s=settle_s,
                                      timeout_s=300.0)
        report["scenario"] = scenario
        problems += [f"scenario: {p}" for p in scenario["problems"]]
        if engine == "stub" and len(handles) > 1:
            ray.kill(handles[-1])
            t = time.monotonic()
            while True:  # the kill is asynchronous: until Ray reports the actor dead
                after = await fleet.loads(timeout_s=10)
                if not after.results[-1].ok or time.monotonic() - t > 30:
                    break
                await asyncio.sleep(0.2)
            report["after_kill"] = after.to_dict()
            kinds = [r.kind for r in after.results]
            if kinds != [None] * (len(handles) - 1) + ["unreachable"]:
                problems.append(f"after killing {report['names'][-1]}: {kinds}")
    return report


def main(argv: Optional[list[str]] = None) -> int:
    """Run the driver; the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(ACTORS), default="stub")
    parser.add_argument("--actors", type=int, default=None, help="actors (default: 2 stubs, 1 real engine)")
    parser.add_argument("--model", default=None, help="the model folder (real engines)")
    parser.add_argument("--load-format", default="dummy")
    parser.add_argument("--reload-from", default=None, help="a checkpoint the swap loads (the engine's own reload)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    n = args.actors or (2 if args.engine == "stub" else 1)
    ray = start_ray()
    handles: list[Any] = []
    started = time.monotonic()
    try:
        handles = make_actors(ray, args.engine, n, args.model, args.load_format)
        report = asyncio.run(drive(ray, args.engine, handles, args.reload_from))
    except Exception:  # noqa: BLE001 - the report carries it to the test
        report = {"engine": args.engine, "problems": [traceback.format_exc()]}
    finally:
        for handle in handles:
            try:
                ray.get(handle.shutdown.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - the killed one, or one that failed to start
                pass
        ray.shutdown()
    report["seconds"] = round(time.monotonic() - started, 1)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({"problems": report["problems"], "seconds": report["seconds"]}, indent=1), flush=True)
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
