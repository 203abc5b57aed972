"""Real HTTP servers on loopback for the client tests: stub engines in their own processes, small
apps served by uvicorn in a thread, and sockets that hang or hang up."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import uvicorn

from targets import REPO, free_port, wait_healthy

STARTUP_S = 30.0


@dataclass
class StubProcess:
    """A stub engine (``python -m engine_plugins.stub``) in its own process."""

    url: str
    proc: subprocess.Popen
    log: Path

    def kill(self) -> None:
        """Kill it at once (a server disappearing)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def stub_process(tmp_dir: Path, *args: str, api_key: Optional[str] = None) -> Iterator[StubProcess]:
    """A stub engine on a free loopback port; always stopped."""
    port = free_port()
    log = tmp_dir / f"stub-{port}.log"
    cmd = [sys.executable, "-m", "engine_plugins.stub", "--port", str(port), *args]
    if api_key:
        cmd += ["--api-key", api_key]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINE_PLUGINS_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, STARTUP_S, log)
        yield StubProcess(url, proc, log)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def serve_app(app) -> Iterator[str]:
    """Serve an ASGI *app* with uvicorn in a thread on a free loopback port; yields its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test app did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def raw_socket_server(hang_up: bool) -> Iterator[str]:
    """A TCP server that accepts and then never answers (*hang_up* False) or reads the request and
    closes the connection without a response (*hang_up* True)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            if hang_up:
                with contextlib.suppress(OSError):
                    conn.settimeout(2)
                    conn.recv(65536)
                conn.close()
            else:
                held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()
