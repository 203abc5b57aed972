"""``make bench``: every figure of the benchmark, or those in ``BENCH_FIGURES``, then the tables
and plots in ``benchmarks/results/``.

    BENCH_FIGURES=5,6 BENCH_ROUNDS=3 make bench     # a quick run: the stub figures only
    make bench                                      # everything, 10 rounds (about 25 minutes here
                                                    # for figures 1-8; figure 9 adds about 11,
                                                    # figure 10 about 7)

Figures 1-4 start SGLang and then vLLM (both without and with the plugin), figure 7 vLLM with one
and then two API processes, figure 8 each engine with the prefix cache scoped by weight version and
not, figure 9 each engine without the plugin and with it (both up at once), each RL framework's
step boundary side by side with the contract's weight swap, figure 10 figure 4 on SGLang's pinned
release and on two older ones the frameworks pin. A real-engine figure holds
``BENCH_LOCK`` (a file, when set) while its servers run, so that it never shares the machine with
another real-engine run. An engine that cannot start stops the run with its log tail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import sys
from typing import Iterator

from . import fleets, prefix_cache, real_engines, report, step_boundary, stub_scaling, vllm_api_servers
from .common import stop_cleanly_on_sigterm, progress, rounds_default, write_json

ALL = (5, 6, 1, 2, 3, 4, 7, 8, 9, 10)


@contextlib.contextmanager
def real_engine_lock() -> Iterator[None]:
    """Hold ``$BENCH_LOCK`` (an flock) for one real-engine figure; nothing when it is not set."""
    path = os.environ.get("BENCH_LOCK")
    if not path:
        yield
        return
    with open(path, "a") as f:
        progress(f"waiting for the lock {path}")
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> None:
    """Run the figures asked for and write the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--figures", default=os.environ.get("BENCH_FIGURES") or ",".join(map(str, ALL)),
                        help="comma-separated figure numbers (BENCH_FIGURES)")
    parser.add_argument("--rounds", type=int, default=rounds_default(), help="rounds per figure (BENCH_ROUNDS, default 10)")
    args = parser.parse_args()
    stop_cleanly_on_sigterm()
    figures = {int(f) for f in args.figures.split(",") if f.strip()}
    unknown = figures - set(ALL)
    if unknown:
        sys.exit(f"BENCH_FIGURES: no figure {sorted(unknown)} (there are {sorted(ALL)})")
    progress(f"figures {sorted(figures)}, {args.rounds} rounds")
    if 5 in figures:
        write_json("stub_scaling", stub_scaling.run(list(stub_scaling.COUNTS), args.rounds))
    if 6 in figures:
        write_json("fleets", fleets.run(list(fleets.SIZES), args.rounds, 4, with_smg=True))
    real = figures & {1, 2, 3, 4}
    if real:
        for engine in ("sglang", "vllm"):
            with real_engine_lock():
                write_json(f"real_{engine}", real_engines.run(engine, args.rounds, real_engines.COUNTS, real))
    if 7 in figures:
        with real_engine_lock():
            write_json("vllm_api_servers", vllm_api_servers.run(args.rounds))
    if 8 in figures:
        figure = []
        for engine in ("sglang", "vllm"):
            with real_engine_lock():
                figure.append(prefix_cache.run(engine, args.rounds))
        write_json("prefix_cache", figure)
    if 9 in figures:
        figure = []
        for engine in ("sglang", "vllm"):
            with real_engine_lock():
                figure.append(step_boundary.run(engine, args.rounds))
        write_json("step_boundary", figure)
    if 10 in figures:
        with real_engine_lock():
            write_json("sglang_releases", real_engines.releases(args.rounds))
    command = f"BENCH_FIGURES={','.join(map(str, sorted(figures)))} BENCH_ROUNDS={args.rounds} make bench"
    for path in report.write(command):
        progress(f"wrote {path}")
    print((report.RESULTS / "README.md").read_text())


if __name__ == "__main__":
    main()
