"""Starts a command as an HTTP server on loopback, waits until it answers, and always stops it.

One spawner for every server the project starts: the real engines (:class:`EngineServer`), the
stub and the engines' fakes of the tests, smg in front of them, and the benchmarks' servers::

    with ServerProcess(lambda port: ["python", "-m", "engine_plugins.engines.stub", "--port", str(port)],
                       log_path=tmp / "stub.log") as server:          # waits for GET /health == 200
        httpx.get(server.url + "/v1/loads")

Each server runs in its own process group (its session), so that a stop reaches its whole tree
and a Ctrl-C in the terminal does not hit it mid-shutdown; its output goes to a log file, whose
tail ends every start error. A server dies with the process that started it, however that one
ends: ``stop()`` on the way out, an ``atexit`` hook for the servers nobody stopped, and a
*watcher* for a process that is killed (no atexit runs then). The watcher is a tiny process of
its own holding the read end of a pipe whose only write end the starting process holds: the
kernel closes it when that process dies, whichever thread started the server (unlike
``PR_SET_PDEATHSIG``, which fires when the starting *thread* ends), and the watcher then stops
the server's group.

Imports only the standard library and httpx.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

import httpx

LOOPBACK = "127.0.0.1"
# Flags whose value is a secret: never written to a log.
SECRET_FLAGS = ("--api-key", "--admin-api-key")
# How long a stopped server's group may take to go after SIGTERM before it gets SIGKILL.
STOP_GRACE_S = 10.0
# The lines of the log that end a start error.
ERROR_TAIL_LINES = 60

Command = Union[Sequence[str], Callable[[int], Sequence[str]]]
Ready = Union[str, Callable[["ServerProcess"], bool]]

# Variables of the harness (tools/launcher): where the engines' venvs are, their Python, the CPU
# profile. Never passed to a server.
HARNESS_VARS = ("ENGINE_PLUGINS_ENGINES_DIR", "ENGINE_PLUGINS_PYTHON", "ENGINE_PLUGINS_CPU_PROFILE")


class StartError(RuntimeError):
    """The server exited or never became ready; the message ends with its log tail."""


def free_loopback_port(highest: int = 65535) -> int:
    """A TCP port no higher than *highest* that was free on 127.0.0.1 a moment ago (the OS picks
    it; picked again while it is higher)."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
        if port <= highest:
            return port
    raise RuntimeError(f"no free loopback port at or below {highest}")


def shown_command(command: Sequence[str]) -> list[str]:
    """*command* as it may be logged: the values of :data:`SECRET_FLAGS` masked."""
    shown = list(command)
    for i, arg in enumerate(shown):
        if arg in SECRET_FLAGS and i + 1 < len(shown):
            shown[i + 1] = "***"
        elif arg.startswith(tuple(f + "=" for f in SECRET_FLAGS)):
            shown[i] = arg.split("=", 1)[0] + "=***"
    return shown


def log_tail(path: Path, n: int) -> str:
    """The last *n* lines of a text file, or a note if it cannot be read."""
    try:
        with open(path, "rb") as f:
            lines = deque(f, maxlen=n)
    except OSError as exc:
        return f"(no log: {exc})"
    return b"".join(lines).decode("utf-8", errors="replace")


def group_alive(pgid: int) -> bool:
    """True while any non-zombie process is in process group *pgid*.

    Zombies are skipped: once the group leader is reaped, orphaned children that already exited
    may linger unreaped (e.g. under a container's PID 1) and must not look like a live server.
    """
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = None
    if entries is None:  # no /proc: fall back to the signal probe, which counts zombies too
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited while we looked
        # Fields after the command name, which may hold spaces and parentheses: state ppid pgrp ...
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def signal_group(pgid: int, sig: int) -> None:
    """Sends *sig* to process group *pgid*; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


# The watcher: waits on the pipe; any byte means "released, the owner stops the server itself",
# end of file means the owner died. It ignores SIGINT, which a terminal's Ctrl-C sends to the
# owner's group: the owner then stops its servers itself, or dies and closes the pipe.
_WATCHER = """
import os, signal, sys, time
fd, pgid, grace = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
signal.signal(signal.SIGINT, signal.SIG_IGN)
if os.read(fd, 1):
    sys.exit(0)
def gone():
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
try:
    os.killpg(pgid, signal.SIGTERM)
except ProcessLookupError:
    sys.exit(0)
end = time.monotonic() + grace
while not gone() and time.monotonic() < end:
    time.sleep(0.1)
try:
    os.killpg(pgid, signal.SIGKILL)
except ProcessLookupError:
    pass
"""


# Servers still running when the interpreter exits (a caller that never reached stop()).
_running: "weakref.WeakSet[ServerProcess]" = weakref.WeakSet()


@atexit.register
def _stop_leftover_servers() -> None:
    """Stops every server this process started and did not stop."""
    for server in list(_running):
        server.stop()


class ServerProcess:
    """A command run as a server on loopback, in its own process group, logging to a file.

    Use as a context manager (``with ServerProcess(...) as server:``) or call ``start()`` and
    ``stop()``. ``stop()`` is idempotent and runs on ``__exit__`` whatever happened. Any thread
    may start it: the server lives until it is stopped or this process dies.
    """

    def __init__(
        self,
        command: Command,
        *,
        log_path: Union[Path, Callable[[int], Path], None] = None,
        port: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[Path] = None,
        ready: Ready = "/health",
        headers: Optional[Mapping[str, str]] = None,
        name: Optional[str] = None,
        start_timeout: float = 60.0,
        stop_grace: float = STOP_GRACE_S,
        poll_interval: float = 0.1,
        request_timeout: float = 2.0,
        before_exec: Optional[Callable[[], None]] = None,
        log_header: Sequence[str] = (),
    ) -> None:
        """Describes the server; nothing runs until ``start()``.

        *command* is the argv, or a function of the port giving it. *port* None picks a free
        loopback port. *log_path* (or a function of the port giving it) receives the server's
        stdout and stderr; None: a file in the temporary directory. *env* None inherits ours; either way without :data:`HARNESS_VARS`.
        *ready* is the path whose GET must answer 200 (with *headers*), or a function of this
        server that says whether it is ready (an HTTP or JSON error counts as not yet).
        *before_exec* runs in the child before exec (e.g. its CPU placement). *log_header*:
        lines written to the log before the server's own output.
        """
        self.port = port if port is not None else free_loopback_port()
        self.command = list(command(self.port) if callable(command) else command)
        self.name = name or Path(self.command[0]).name
        if callable(log_path):
            log_path = log_path(self.port)
        elif log_path is None:
            fd, path = tempfile.mkstemp(prefix=f"{self.name}-{self.port}-", suffix=".log")
            os.close(fd)
            log_path = Path(path)
        self.log_path = Path(log_path)
        # The harness's own settings are not the server's: the plugin refuses ENGINE_PLUGINS_*
        # names it does not know, and these are read only here, in the harness.
        self.env = {k: v for k, v in (os.environ if env is None else env).items() if k not in HARNESS_VARS}
        self.cwd = cwd
        self.ready = ready
        self.headers = dict(headers or {})
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.poll_interval = poll_interval
        self.request_timeout = request_timeout
        self.before_exec = before_exec
        self.log_header = list(log_header)
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.startup_seconds: Optional[float] = None
        self._watcher: Optional[subprocess.Popen[bytes]] = None
        self._watch_fd: Optional[int] = None
        self._stop_lock = threading.Lock()
        self._stopped = False

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        """The server's pid, which is also its process group's id (None before ``start()``)."""
        return self.process.pid if self.process else None

    def poll(self) -> Optional[int]:
        """The server's exit code, or None while it runs (or before it starts)."""
        return self.process.poll() if self.process else None

    def start(self) -> "ServerProcess":
        """Launches the server and returns once it is ready.

        Raises StartError (with the log tail) if the process exits first or is not ready within
        *start_timeout* seconds; the process group is stopped before the error propagates.
        """
        if self.process is not None:
            raise RuntimeError("ServerProcess.start() called twice; make a new ServerProcess")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            for line in [f"$ {' '.join(shown_command(self.command))}", *self.log_header]:
                log.write(f"{line}\n".encode())
            log.flush()
            # Own session: signals reach the whole tree through its group, and a Ctrl-C in the
            # terminal does not.
            self.process = subprocess.Popen(
                self.command, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=self.before_exec,
            )
        _running.add(self)
        try:
            self._watch()
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _watch(self) -> None:
        """Starts the watcher that stops the server's group if this process dies."""
        assert self.process is not None
        read_fd, self._watch_fd = os.pipe()  # both close on exec: only the watcher gets read_fd
        try:
            self._watcher = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHER, str(read_fd), str(self.process.pid), str(self.stop_grace)],
                pass_fds=(read_fd,), stdin=subprocess.DEVNULL, start_new_session=True,
            )
        finally:
            os.close(read_fd)

    def _wait_ready(self, started: float) -> None:
        """Polls the readiness check until it passes; fails at once if the server exits."""
        assert self.process is not None
        deadline = started + self.start_timeout
        with httpx.Client(timeout=self.request_timeout, headers=self.headers) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise StartError(
                        f"{self.name} exited with code {code} before it was ready; "
                        f"log {self.log_path}:\n{self.log_tail(ERROR_TAIL_LINES)}"
                    )
                if self._is_ready(client):
                    return
                if time.monotonic() > deadline:
                    raise StartError(
                        f"{self.name} not ready after {self.start_timeout:.0f} s; "
                        f"log {self.log_path}:\n{self.log_tail(ERROR_TAIL_LINES)}"
                    )
                time.sleep(self.poll_interval)

    def _is_ready(self, client: httpx.Client) -> bool:
        """One readiness check; a server not listening yet, or answering garbage, is not ready."""
        try:
            if callable(self.ready):
                return bool(self.ready(self))
            return client.get(self.url + self.ready).status_code == 200
        except (httpx.HTTPError, ValueError, KeyError):
            return False

    def signal(self, sig: int) -> None:
        """Sends *sig* to every process of the server (SIGSTOP, SIGCONT, ...)."""
        if self.process is not None:
            signal_group(self.process.pid, sig)

    def kill(self) -> None:
        """Kills the server's group at once (a server disappearing mid-call); ``stop()`` still
        runs, and releases the watcher."""
        if self.process is not None and self.process.poll() is None:
            signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> Optional[int]:
        """Stops the whole process group and returns the server's exit code (None if never started).

        SIGTERM to the group, then SIGKILL to the group if anything in it is still alive after
        *stop_grace* seconds. Safe to call more than once, from any thread.
        """
        with self._stop_lock:
            process = self.process
            if process is None or self._stopped:
                return None if process is None else process.returncode
            self._stopped = True
        _running.discard(self)
        pgid = process.pid  # start_new_session made the server its group's leader
        deadline = time.monotonic() + self.stop_grace
        signal_group(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        # Children (vLLM's engine core, SGLang's scheduler) may outlive the leader briefly.
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if process.poll() is None or group_alive(pgid):
            self.note(f"still running {self.stop_grace:.0f} s after SIGTERM; sending SIGKILL to the group")
            signal_group(pgid, signal.SIGKILL)
            process.wait()
            kill_deadline = time.monotonic() + 5.0
            while group_alive(pgid) and time.monotonic() < kill_deadline:
                time.sleep(0.1)
        self._release_watcher()
        return process.returncode

    def _release_watcher(self) -> None:
        """Tells the watcher the server is stopped (one byte), and reaps it."""
        if self._watch_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self._watch_fd, b"x")
            os.close(self._watch_fd)
            self._watch_fd = None
        if self._watcher is not None:
            try:
                self._watcher.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self._watcher.kill()
                self._watcher.wait()
            self._watcher = None

    def note(self, message: str) -> None:
        """Appends a line to the server's log, so that the log tells why the server died."""
        try:
            with open(self.log_path, "a") as log:
                log.write(f"[spawn] {message}\n")
        except OSError:
            print(f"[spawn] {self.name}: {message}", file=sys.stderr)

    def log_tail(self, n: int = 200) -> str:
        """The last *n* lines of the server's log (stdout and stderr)."""
        return log_tail(self.log_path, n)

    def __enter__(self) -> "ServerProcess":
        """Starts the server (stopping it again if the start fails)."""
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        """Stops the server, also when the block raised."""
        self.stop()

    def __repr__(self) -> str:
        """Name, URL and pid, for test output."""
        return f"ServerProcess({self.name!r}, url={self.url!r}, pid={self.pid})"
