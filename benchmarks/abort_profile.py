"""Where an abort with wait spends its time at many requests in flight, on one real engine with the
plugin: *n* ``/partial_generate`` requests of ``TOKENS`` tokens, one ``POST /abort_requests
{"wait": true}`` once the engine holds them all, timed to its answer and to the last client's
answer, with the decode step at the same load; with ``--py-spy``, a py-spy profile of each of the
server's processes (the API process, the scheduler or engine core) over the abort. (py-spy is not a
dependency of the project: ``pip install py-spy`` into the venv first).

    python -m benchmarks.abort_profile sglang --counts 128 512 --rounds 2 --py-spy
    python -m benchmarks.abort_profile vllm --baseline /path/to/other/checkout   # before/after

Prints one line per round and, for each profile, its top frames (own time and with callees).
Not part of ``make bench``: a tool for finding the cost of an abort, figure 1 measures it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from tools.launcher.engine_server import EngineServer, ensure_engine

from .common import KEY, REPO, group_processes, ms, progress
from .real_engines import Engine, decode_step_ms

TOKENS = 2000
PROFILE_DIR = REPO / ".engines" / "profiles"


def start_profiles(pids: dict[int, str], seconds: float, tag: str) -> list[tuple[str, Path, subprocess.Popen]]:
    """One ``py-spy record`` (raw collapsed stacks, idle frames left out) per process."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    runs = []
    for pid, title in pids.items():
        out = PROFILE_DIR / f"{tag}-{pid}.txt"
        command = [py_spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "200", "-f", "raw", "-o", str(out), "--nonblocking"]
        runs.append((title, out, subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    return runs


def summary(path: Path, top: int = 12) -> str:
    """The frames of a raw py-spy profile that take the most samples: own and with callees."""
    own: collections.Counter = collections.Counter()
    total: collections.Counter = collections.Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        samples += n
        frames = [f.split(" (")[0] + " " + f.rsplit("/", 1)[-1].rstrip(")") for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    lines = [f"  {samples} samples; own:"]
    lines += [f"    {100 * c / max(samples, 1):5.1f}%  {f}" for f, c in own.most_common(top)]
    lines += ["  with callees:"]
    lines += [f"    {100 * c / max(samples, 1):5.1f}%  {f}" for f, c in total.most_common(top * 2)]
    return "\n".join(lines)


async def abort_once(e: Engine, n: int, profile: bool, tag: str) -> dict:
    """Fill *n*, abort all with wait; the times, and the profiles' summaries when asked."""
    tasks = await e.fill(n, True, max_tokens=TOKENS)
    runs = start_profiles(group_processes(e.pid), 4 + n / 64, tag) if profile else []
    if runs:
        await asyncio.sleep(1.0)  # py-spy attaches
    start = time.perf_counter()
    outcome = await e.plugin_abort()
    abort_ms = ms(time.perf_counter() - start)
    answers = await asyncio.gather(*tasks)
    last_ms = ms(time.perf_counter() - start)
    for _, _, run in runs:
        run.wait()
    return {"abort_ms": abort_ms, "last_answer_ms": last_ms, "idle": outcome.get("idle"),
            "tokens": sum(a["tokens"] for a in answers), "profiles": [(t, p) for t, p, _ in runs]}


async def measure(engines: list[tuple[str, Engine]], counts: list[int], rounds: int, profile: bool) -> None:
    """Every count, *rounds* times on each server in turn; one line each, and the profiles of
    the last round."""
    for _, e in engines:
        await e.setup()
        await abort_once(e, 2, False, "warm")
    for n in counts:
        step = await decode_step_ms(engines[0][1], n)
        for i in range(rounds):
            for label, e in engines:
                last = profile and i == rounds - 1
                r = await abort_once(e, n, last, f"{e.engine}-{label}-{n}")
                progress(f"{e.engine} {label} {n} in flight: abort {r['abort_ms']:.0f} ms ({r['abort_ms'] / step:.1f} steps of "
                         f"{step:.1f} ms), last answer {r['last_answer_ms']:.0f} ms, idle {r['idle']}, {r['tokens']} tokens")
                for title, path in r["profiles"]:
                    if path.exists():
                        print(f"{e.engine} {label} {n} in flight, profile of {title} ({path}):\n{summary(path)}", flush=True)


def main(argv: Optional[list[str]] = None) -> None:
    """Start the engine with the plugin (and with another checkout's, with --baseline) and measure."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("engine", choices=["sglang", "vllm"])
    parser.add_argument("--counts", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--py-spy", action="store_true", help="profile the last round of each count")
    parser.add_argument("--baseline", type=Path, help="another checkout whose plugin runs side by side (before/after)")
    args = parser.parse_args(argv)
    ensure_engine(args.engine, REPO)
    env = {} if args.engine == "sglang" else {"VLLM_PLUGINS": "engine_plugins"}
    extra = ["--enable-metrics"] if args.engine == "sglang" else []
    checkouts = [("this", REPO)] + ([("baseline", args.baseline)] if args.baseline else [])
    with contextlib.ExitStack() as stack:
        servers = [(label, stack.enter_context(EngineServer(args.engine, root, api_key=KEY, env=env, extra_args=extra)))
                   for label, root in checkouts]

        async def go() -> None:
            engines = [(label, Engine(args.engine, s.url, True, s.process.pid)) for label, s in servers]
            try:
                await measure(engines, args.counts, args.rounds, args.py_spy)
            finally:
                for _, e in engines:
                    await e.close()
        asyncio.run(go())


if __name__ == "__main__":
    main()
