"""The servers the contract suite runs against, each started for real and reached over HTTP.

Every target is a context manager yielding a :class:`Target`. The contract suite runs unchanged
against each; the engine issues add their targets here.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Optional

from tools.launcher.spawn import ServerProcess
from tools.launcher.spawn import free_loopback_port as free_port  # noqa: F401 - the tests' name for it
from engine_versions import OPT_IN_VERSION_TARGETS

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
API_KEY = "contract-suite-key"


@dataclass
class Target:
    """A running server that speaks the contract."""

    name: str
    url: str
    api_key: str
    long_tokens: int
    """``max_new_tokens`` long enough that a request cannot finish while a test arranges things."""
    log_tail: Callable[[], str] = lambda: ""
    honours_seed: bool = True
    """False where the engine cannot honour ``seed`` and the plugin refuses it (docs/contract.md: the deliberate differences)."""
    real: bool = False
    """A real engine (slow on two cores: the soaks and fuzzers do fewer rounds)."""
    signal: Optional[Callable[[int], None]] = None
    """Send a signal to every process of the server (SIGSTOP, SIGCONT), where a test may."""
    checkpoints: tuple[Path, ...] = ()
    """Checkpoints of the served model with real, different weights (the first one loaded at
    start), where the target serves real weights: the weight-swap tests' A and B."""
    process: Optional[ServerProcess] = None
    """The server's processes (its exit code, its pid), for a test that kills or watches them."""
    engine_app: bool = True
    """The engine's own HTTP app is served beside the contract (its generation routes, metrics and
    error shapes). False for an engine held in-process, whose contract is served from
    ``engine_plugins.inprocess.attach(engine).app()``: its own requests are its holder's Python
    calls (tests/vllm/test_vllm_inprocess.py, tests/sglang/test_sglang_inprocess.py)."""

    @property
    def finish_tokens(self) -> int:
        """``max_new_tokens`` of a request a test lets run to its end. On a real engine (tens of
        ms a step when batched) ``long_tokens`` takes half a minute to run out; 300 still take
        seconds, far longer than the control call a test sends once the request runs."""
        return 300 if self.real else self.long_tokens


def make_checkpoints(python: Path, base: Path, seeds: tuple[int, ...] = (1, 2)) -> tuple[Path, ...]:
    """Checkpoints of the tiny model at *base* with real weights, one per seed, made by *python*
    (an engine venv's: it has torch and transformers) beside *base* the first time, and kept
    there (named by the script's hash, so that a change to it makes them anew)."""
    script = TESTS / "swap" / "make_checkpoint.py"
    digest = hashlib.sha256(script.read_bytes()).hexdigest()[:12]
    made = []
    for seed in seeds:
        out = base.with_name(f"{base.name}-checkpoint-{seed}-{digest}")
        if not (out / "model.safetensors").exists():  # the script writes it last, by a rename
            subprocess.run([str(python), str(script), str(base), str(out), "--seed", str(seed)], check=True,
                           capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        made.append(out)
    return tuple(made)


def server_env(env: Optional[dict] = None) -> dict:
    """The environment of a server the tests start: this one without any ``ENGINE_PLUGINS_*``
    variable, with ``tests/`` on ``PYTHONPATH`` (the fakes are ``fakes.sglang`` and
    ``fakes.vllm``), plus *env*."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("ENGINE_PLUGINS_")}
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), out.get("PYTHONPATH", "")) if p)
    out.update(env or {})
    return out


def doctor_url(target: "Target") -> dict:
    """``engine-plugins doctor --url`` on *target*, as a user runs it (its own process): its JSON,
    with ``exit_code``."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "engine_plugins.cli", "doctor", "--url", target.url, "--api-key", target.api_key,
                           "--json"], cwd=REPO, env=server_env(), capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    assert report["exit_code"] == done.returncode, done.stderr
    return report


def launch_code_path(ray: bool = False) -> str:
    """``PYTHONPATH`` for a server started by a framework's launch code under tests/ (run with
    ``python -m``), with Ray for the engine's interpreter when that code starts a Ray actor."""
    from tools.launcher.engine_server import ray_dir

    return os.pathsep.join([str(TESTS), *([str(ray_dir())] if ray else [])])


@contextlib.contextmanager
def module_server(tmp_dir: Path, module: str, *args: str, env: Optional[dict] = None, startup_s: float = 30) -> Iterator[ServerProcess]:
    """``python -m module --port P *args`` on a free loopback port, in :func:`server_env`, ready
    once GET /health answers 200; always stopped."""
    with ServerProcess(lambda port: [sys.executable, "-m", module, "--port", str(port), *args],
                       log_path=lambda port: tmp_dir / f"{module.rsplit('.', 1)[-1]}-{port}.log",
                       env=server_env(env), cwd=REPO, name=module, start_timeout=startup_s) as server:
        yield server


@contextlib.contextmanager
def stub_server(tmp_dir: Path, *args: str, env: Optional[dict] = None, api_key: str = API_KEY) -> Iterator[Target]:
    """The stub engine served by uvicorn in its own process, on loopback."""
    with module_server(tmp_dir, "engine_plugins.engines.stub", "--api-key", api_key, *args, env=env) as server:
        yield Target(name="stub", url=server.url, api_key=api_key, long_tokens=1500, log_tail=server.log_tail, signal=server.signal,
                     process=server)


# The targets that are real engine servers: the suite gives them fewer, longer rounds (the fuzz,
# the race soak) and reruns a test whose setup a stalled machine failed (conftest.py). Each
# targets_<engine>.py names its own real targets in a REAL_TARGETS set of its own.
REAL_TARGETS: set[str] = {"sglang", "vllm"}

TARGETS: dict[str, Callable[[Path], ContextManager[Target]]] = {
    # The context length of the real targets' tiny models, so that limits are tested alike.
    "stub": lambda tmp: stub_server(tmp, "--step-s", "0.002", "--tokenize-s", "0.005", "--context-length", "2048"),
}


# Targets too slow for every run: only run when named (--target NAME); among them the releases
# with a CPU build that no RL framework pins (make test-releases).
OPT_IN_TARGETS: set[str] = set(OPT_IN_VERSION_TARGETS)
# Targets only the tests that name them (@pytest.mark.targets) run on: the weight-swap tests'
# servers of their own, which the contract suite as a whole need not run on again.
DEDICATED_TARGETS: set[str] = set()
# The fakes that follow a release other than the pinned one: the soaks and the fuzz run a share of
# their rounds there (tiers.rounds).
RELEASE_FAKES: set[str] = set()
# Targets that serve no routes of the engine's own (an engine held in-process, the contract served
# by engine_plugins.inprocess): the tests marked engine_routes do not run there.
NO_ENGINE_ROUTES: set[str] = set()

# Each engine adds its targets in a module of its own, tests/targets_<engine>.py, defining TARGETS.
for _module in sorted(Path(__file__).parent.glob("targets_*.py")):
    _targets = importlib.import_module(_module.stem)
    TARGETS.update(_targets.TARGETS)
    REAL_TARGETS.update(getattr(_targets, "REAL_TARGETS", ()))
    OPT_IN_TARGETS |= getattr(_targets, "OPT_IN_TARGETS", set())
    DEDICATED_TARGETS |= getattr(_targets, "DEDICATED_TARGETS", set())
    RELEASE_FAKES |= getattr(_targets, "RELEASE_FAKES", set())
    NO_ENGINE_ROUTES |= getattr(_targets, "IN_PROCESS_TARGETS", set())

# The targets whose engine has routes of its own (every one but the stub), for the tests of what
# only real engines do; the dedicated weight-swap servers are left to the tests that name them.
ENGINE_TARGETS = tuple(name for name in TARGETS if name != "stub" and name not in DEDICATED_TARGETS)
