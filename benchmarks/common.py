"""What every benchmark shares: medians and p95, progress lines, and where results go."""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence, TypeVar

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
# The logs of the servers a benchmark starts: beside the engines' (``.engines/``, git-ignored).
LOGS = REPO / ".engines" / "logs"
KEY = "bench-key"
Way = TypeVar("Way")


def p95(values: Iterable[float]) -> float:
    """The 95th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def stats(values: Iterable[float]) -> dict:
    """Median, p95, min, max and count of *values* (an empty list gives only the count)."""
    values = list(values)
    if not values:
        return {"n": 0}
    return {"median": statistics.median(values), "p95": p95(values), "min": min(values), "max": max(values), "n": len(values)}


_START = time.monotonic()


def progress(message: str) -> None:
    """One progress line on stderr, with the seconds since the run began."""
    print(f"[bench {time.monotonic() - _START:7.1f} s] {message}", file=sys.stderr, flush=True)


def rounds_default(default: int = 10) -> int:
    """``BENCH_ROUNDS`` from the environment (``make bench BENCH_ROUNDS=3``), else *default*."""
    return int(os.environ.get("BENCH_ROUNDS") or default)


def write_json(name: str, data: object) -> Path:
    """Write *data* as ``benchmarks/results/<name>.json``; the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def read_json(name: str) -> object:
    """``benchmarks/results/<name>.json``, or None when that figure has not run."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def server_log(name: str) -> Callable[[int], Path]:
    """Where the server *name* a benchmark starts on a port logs: ``.engines/logs/<name>-<time>-<port>.log``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return lambda port: LOGS / f"bench-{name}-{stamp}-{port}.log"


def ms(seconds: float) -> float:
    """Seconds in milliseconds."""
    return seconds * 1000.0


def stop_cleanly_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that the servers a benchmark started are stopped by
    their ``finally`` blocks rather than left running."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of *pid* so far."""
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def group_processes(pgid: int) -> dict[int, str]:
    """The processes of process group *pgid*: pid -> the start of its command line (SGLang's process title)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            found[int(entry)] = cmdline[:60]
    return found


def median_interval(values: Iterable[float], confidence: float = 0.95, resamples: int = 2000) -> tuple[float, float]:
    """A bootstrap interval for the median of *values* (percentile method, seeded: the same
    data gives the same interval)."""
    values = list(values)
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    cut = (1 - confidence) / 2
    return medians[int(cut * resamples)], medians[min(resamples - 1, int((1 - cut) * resamples))]


def in_turn(ways: Sequence[Way], round_index: int) -> list[Way]:
    """The order in which round *round_index* runs *ways*: reversed every other round, so that
    none always runs first (right after the other's load, or on a machine that has just quietened)."""
    return list(ways) if round_index % 2 == 0 else list(reversed(ways))
