"""The spawner (tools.launcher.spawn): a server started, ready, stopped; a start that
fails says why; a server outlives the thread that started it and dies with its process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import pytest

from tools.launcher.spawn import ServerProcess, StartError

# A tiny HTTP server: 200 on /health, the pid that answered on /pid. Standard library only.
TINY_SERVER = textwrap.dedent("""
    import http.server, os, sys
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = {"/health": b"ok", "/pid": str(os.getpid()).encode()}.get(self.path)
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body or b"")
        def log_message(self, *args):
            pass
    print("tiny server up", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
""")


def tiny_server(tmp_path, **kwargs) -> ServerProcess:
    """The tiny server on a free port, logging under *tmp_path*."""
    return ServerProcess(lambda port: [sys.executable, "-c", TINY_SERVER, str(port)],
                         log_path=lambda port: tmp_path / f"tiny-{port}.log", name="tiny", **kwargs)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pid: int, seconds: float) -> bool:
    """Whether *pid* is gone within *seconds*."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_a_server_starts_on_a_free_port_answers_and_stops(tmp_path):
    with tiny_server(tmp_path) as server:
        answer = httpx.get(server.url + "/pid", timeout=10)
        assert answer.status_code == 200 and int(answer.text) == server.pid
        assert server.startup_seconds is not None and server.log_path.exists()
        assert os.getpgid(server.pid) == server.pid, "the server leads a process group of its own"
    assert server.poll() is not None and wait_gone(server.pid, 5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/health", timeout=2)
    assert "tiny server up" in server.log_tail()


def test_a_server_that_dies_at_start_fails_with_its_log_tail(tmp_path):
    server = ServerProcess([sys.executable, "-c", "import sys; print('no model here', flush=True); sys.exit(3)"],
                           log_path=tmp_path / "dies.log", name="dying")
    with pytest.raises(StartError, match=r"(?s)dying exited with code 3 before it was ready.*no model here"):
        server.start()


def test_a_server_that_never_answers_fails_after_the_deadline_and_is_stopped(tmp_path):
    server = ServerProcess([sys.executable, "-c", "import time; print('thinking', flush=True); time.sleep(60)"],
                           log_path=tmp_path / "mute.log", name="mute", start_timeout=1.5, stop_grace=2)
    with pytest.raises(StartError, match=r"(?s)mute not ready after 2 s.*thinking"):
        server.start()
    assert server.poll() is not None and wait_gone(server.pid, 5)


def test_the_log_never_shows_a_key(tmp_path):
    server = ServerProcess([sys.executable, "-c", "import sys; sys.exit(1)", "--api-key", "secret-1"],
                           log_path=tmp_path / "key.log")
    with pytest.raises(StartError) as failure:
        server.start()
    assert "secret-1" not in failure.value.args[0] and "--api-key ***" in server.log_tail()


def test_a_server_started_by_a_thread_that_ended_runs_until_stopped(tmp_path):
    server = tiny_server(tmp_path)
    thread = threading.Thread(target=server.start)
    thread.start()
    thread.join()
    try:
        time.sleep(1.0)  # PR_SET_PDEATHSIG would have fired as the thread ended
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    finally:
        server.stop()
    assert wait_gone(server.pid, 5)


def test_a_server_dies_with_the_process_that_started_it_even_when_that_one_is_killed(tmp_path):
    # The starting process starts the server from a thread that ends, then is SIGKILLed: no
    # atexit runs, and only the watcher can stop the server.
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, threading, time
        from tools.launcher.spawn import ServerProcess
        server = ServerProcess(lambda port: [sys.executable, "-c", {TINY_SERVER!r}, str(port)],
                               log_path={str(tmp_path / "orphan.log")!r})
        thread = threading.Thread(target=server.start)
        thread.start()
        thread.join()
        print(server.pid, flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert alive(child), "the server runs while its starter does"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    gone = wait_gone(child, 30)
    if not gone:
        os.killpg(child, signal.SIGKILL)
    assert gone, "the server outlived its killed starter"
