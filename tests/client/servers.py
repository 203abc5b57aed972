"""Real HTTP servers on loopback for the client tests: stub engines and the engines' fakes without
the plugin in their own processes, a failing app served by uvicorn in a thread, and sockets that
hang or hang up."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import httpx
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from targets import ServerProcess, free_port, module_server

STARTUP_S = 30.0


@contextlib.contextmanager
def stub_process(tmp_dir: Path, *args: str, api_key: Optional[str] = None) -> Iterator[ServerProcess]:
    """A stub engine on a free loopback port; always stopped (``.kill()`` makes it disappear)."""
    key_args = ("--api-key", api_key) if api_key else ()
    with module_server(tmp_dir, "engine_plugins.engines.stub", *key_args, *args, startup_s=STARTUP_S) as server:
        yield server


@dataclass
class NativeServer:
    """An engine's fake serving the engine's own routes, without the plugin."""

    url: str

    def calls(self) -> list[tuple[str, Any]]:
        """``(route, body)`` of every call the engine's control routes received, in order."""
        return [tuple(call) for call in httpx.get(self.url + "/fake/calls", timeout=30).json()]


@contextlib.contextmanager
def native_server(tmp_dir: Path, engine: str, *args: str) -> Iterator[NativeServer]:
    """``fakes.sglang`` or ``fakes.vllm`` with ``--no-plugin`` on a free loopback port; always stopped."""
    with module_server(tmp_dir, f"fakes.{engine}", "--no-plugin", *args, startup_s=STARTUP_S) as server:
        yield NativeServer(server.url)


def failing_app() -> FastAPI:
    """Answers 500 to everything, as a server whose engine died."""
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def everything(path: str):
        return JSONResponse({"error": {"message": "engine core died", "type": "internal_error"}}, status_code=500)

    return app


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


ANSWER = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'


def _read_request(conn: socket.socket) -> None:
    """Read one whole HTTP request: its head and a Content-Length body may arrive in separate
    segments, and a server that answered after the first would take the rest for the next request."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


@contextlib.contextmanager
def raw_socket_server(mode: str) -> Iterator[str]:
    """A TCP server that accepts and then never answers (*mode* ``silent``), reads each request
    and closes the connection without a response (``hang_up``), or answers the first request on
    each connection, keeps it open and closes it when the next request arrives on it, as a
    server whose keep-alive timer fires just then does (``answer_once``)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.settimeout(10)
            _read_request(conn)
            if mode == "answer_once":
                conn.sendall(ANSWER)
                conn.settimeout(30)
                conn.recv(65536)
        conn.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            if mode == "silent":
                held.append(conn)
            else:
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

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
