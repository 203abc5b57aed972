"""smg, the SGLang model gateway (the ``smg`` package of the test extra, a Rust binary), started
on loopback with its RL control plane in front of running workers, and always stopped.

Everything smg binds is on 127.0.0.1: its router port and its Prometheus port (which would
otherwise listen on 0.0.0.0:29000). ``--api-key`` is the workers' key, which smg sends to each
worker, and also guards smg's own routes, so the tests call smg with the same key.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import httpx

from tools.launcher.spawn import ServerProcess, StartError
from targets import REPO, free_port

# smg polls each worker's /v1/loads every this many seconds (its default is 10).
LOAD_MONITOR_INTERVAL_S = 1
STARTUP_S = 60.0


@dataclass
class SmgGateway:
    """A running smg: its URL, the key that opens it, and its log."""

    url: str
    api_key: str
    worker_urls: list[str]
    process: ServerProcess

    def headers(self) -> dict[str, str]:
        """The bearer header for smg's routes."""
        return {"Authorization": f"Bearer {self.api_key}"}

    def log_tail(self, n: int = 80) -> str:
        """The last *n* lines of smg's log."""
        return self.process.log_tail(n)


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


def lists_ready(worker_urls: Sequence[str], api_key: str, listed: dict) -> Callable[[ServerProcess], bool]:
    """smg's readiness: ``GET /v1/rl/workers`` lists every one of *worker_urls* as ready. What it
    listed last is kept in *listed*, for the error of an smg that never gets there."""
    wanted = set(worker_urls)

    def ready(smg: ServerProcess) -> bool:
        answer = httpx.get(smg.url + "/v1/rl/workers", headers={"Authorization": f"Bearer {api_key}"}, timeout=2)
        if answer.status_code != 200:
            return False
        listed.clear()
        listed.update({w["url"]: w["health"] for w in answer.json()["workers"]})
        return wanted <= {url for url, health in listed.items() if health == "ready"}

    return ready


@contextlib.contextmanager
def smg_gateway(tmp_dir: Path, worker_urls: Sequence[str], api_key: str) -> Iterator[SmgGateway]:
    """smg in front of *worker_urls*, yielded once its discovery lists every one of them ready."""
    listed: dict = {}
    smg = ServerProcess(lambda port: smg_command(port, free_port(), worker_urls, api_key),
                        log_path=lambda port: tmp_dir / f"smg-{port}.log", cwd=REPO, name="smg",
                        ready=lists_ready(worker_urls, api_key, listed), start_timeout=STARTUP_S)
    try:
        smg.start()
    except StartError as exc:
        raise StartError(f"smg did not list {sorted(worker_urls)} as ready (last listed {listed}): {exc}") from None
    try:
        yield SmgGateway(smg.url, api_key, list(worker_urls), smg)
    finally:
        smg.stop()
