"""smg, the SGLang model gateway (the ``smg`` package of the test extra, a Rust binary), started
on loopback with its RL control plane in front of running workers, and always stopped.

Everything smg binds is on 127.0.0.1: its router port and its Prometheus port (which would
otherwise listen on 0.0.0.0:29000). ``--api-key`` is the workers' key, which smg sends to each
worker, and also guards smg's own routes, so the tests call smg with the same key.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import httpx

from targets import REPO, free_port, stop_process

# smg polls each worker's /v1/loads every this many seconds (its default is 10).
LOAD_MONITOR_INTERVAL_S = 1
STARTUP_S = 60.0


@dataclass
class SmgGateway:
    """A running smg: its URL, the key that opens it, and its log."""

    url: str
    api_key: str
    worker_urls: list[str]
    log: Path
    proc: subprocess.Popen

    def headers(self) -> dict[str, str]:
        """The bearer header for smg's routes."""
        return {"Authorization": f"Bearer {self.api_key}"}

    def log_tail(self, n: int = 80) -> str:
        """The last *n* lines of smg's log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""


def smg_command(port: int, metrics_port: int, worker_urls: Sequence[str], api_key: str) -> list[str]:
    """``python -m smg launch`` with the RL control plane, every port on loopback."""
    return [
        sys.executable, "-m", "smg", "launch",
        "--host", "127.0.0.1", "--port", str(port),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
        "--worker-urls", *worker_urls,
        "--api-key", api_key,
        "--enable-rl",
        "--load-monitor-interval", str(LOAD_MONITOR_INTERVAL_S),
        "--log-level", "debug",
    ]


@contextlib.contextmanager
def smg_gateway(tmp_dir: Path, worker_urls: Sequence[str], api_key: str) -> Iterator[SmgGateway]:
    """smg in front of *worker_urls*, yielded once its discovery lists every one of them ready."""
    port = free_port()
    log = tmp_dir / f"smg-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(smg_command(port, free_port(), worker_urls, api_key), stdout=out,
                                stderr=subprocess.STDOUT, cwd=REPO)
    gateway = SmgGateway(f"http://127.0.0.1:{port}", api_key, list(worker_urls), log, proc)
    try:
        _wait_ready(gateway)
        yield gateway
    finally:
        stop_process(proc)


def _wait_ready(gateway: SmgGateway) -> None:
    """Until ``GET /v1/rl/workers`` lists every worker URL as ready; fail with smg's log if not."""
    end = time.monotonic() + STARTUP_S
    wanted = set(gateway.worker_urls)
    listed: dict = {}
    while time.monotonic() < end:
        if gateway.proc.poll() is not None:
            raise RuntimeError(f"smg exited with {gateway.proc.returncode}:\n{gateway.log_tail()}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            answer = httpx.get(gateway.url + "/v1/rl/workers", headers=gateway.headers(), timeout=2)
            if answer.status_code == 200:
                listed = {w["url"]: w["health"] for w in answer.json()["workers"]}
                if wanted <= {url for url, health in listed.items() if health == "ready"}:
                    return
        time.sleep(0.1)
    raise RuntimeError(f"smg did not list {sorted(wanted)} as ready within {STARTUP_S} s (listed {listed}):\n{gateway.log_tail()}")
