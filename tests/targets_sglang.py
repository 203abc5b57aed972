"""SGLang contract targets.

- ``sglang-stub``: the REAL SGLang plugin code installed on a fake of SGLang 0.5.23's
  TokenizerManager and scheduler (``fakes.sglang``), served by uvicorn in
  a subprocess. Fast; needs no SGLang.
- ``sglang``: a real SGLang 0.5.23 server (``python -m sglang.launch_server``) on the CPU with the
  tiny random model; the plugin is found by SGLang's own ``load_plugins()`` through the editable
  install in ``.engines/sglang``.
- ``sglang-0.5.19-stub``: the fake as SGLang 0.5.19 (no dispatch mark: the plugin's shims).
- ``sglang-0.5.18-stub``: the fake as SGLang 0.5.18 (0.5.19's shims, and no weight version in
  the engine: the plugin keeps it and labels the tokens).
- ``sglang-0.5.17-stub``: the fake as SGLang 0.5.17 (0.5.18's, with its abort marking request
  states and its own dispatch mark and failure-path abort).
- ``sglang-0.5.16-stub``: the fake as SGLang 0.5.16 (0.5.18's, with the weight version in the
  server args).
- ``sglang-0.5.12-stub``: the fake as SGLang 0.5.12 (0.5.16's, with the streaming flag in the
  server args, no failure path before dispatch, and the loads as dataclasses).
- ``sglang-stub-dp2``: the fake with two data-parallel ranks behind its DP controller.
- ``sglang-dp2``: the real server with ``--dp-size 2``: SGLang's data-parallel controller in front
  of two schedulers, one per core.
- ``sglang-spawned``: the real server started as slime, miles and NeMo-RL start it, a spawned
  ``multiprocessing`` child of their Ray actor running ``launch_server`` (the smoke subset and
  their calls).
- ``sglang-inprocess``: the real ``sglang.Engine`` held in-process, as ROLL holds it, its contract
  served by ``engine_plugins.inprocess.attach(engine).app()`` (the smoke subset).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Optional

from engine_versions import SUPPORTED
from targets import API_KEY, REPO, Target, launch_code_path, make_checkpoints, module_server


@contextlib.contextmanager
def sglang_fake_server(tmp_dir: Path, *args: str, env: Optional[dict] = None, api_key: str = API_KEY,
                       name: str = "sglang-stub") -> Iterator[Target]:
    """The SGLang fake with the plugin, in its own process on loopback."""
    with module_server(tmp_dir, "fakes.sglang", "--api-key", api_key, *args, env=env) as server:
        yield Target(name=name, url=server.url, api_key=api_key, long_tokens=1500, log_tail=server.log_tail, signal=server.signal,
                     process=server)


# Extra flags for the real server. Seeds would need --enable-deterministic-inference, which SGLang
# 0.5.23 refuses with the CPU attention backend (torch_native). --enable-metrics: SGLang serves
# /metrics (with the plugin's metrics) only when asked.
SGLANG_ARGS: tuple[str, ...] = ("--enable-metrics",)


@contextlib.contextmanager
def sglang_real_server(tmp_dir: Path, extra_args: tuple[str, ...] = SGLANG_ARGS, env: Optional[dict] = None,
                       version: Optional[str] = None, name: Optional[str] = None, real_weights: bool = False,
                       module: Optional[str] = None, ray: bool = False) -> Iterator[Target]:
    """A real SGLang server with the plugin, built and reused by ``ensure_engine``: the pinned
    0.5.23, or *version* from its layered venv. *name*: the target's name (default ``sglang``,
    or ``sglang@<version>``). *real_weights*: serve checkpoint A of two made now (the target's
    ``checkpoints``) instead of random weights. *module*: a framework's launch code under tests/
    (run with ``python -m``, SGLang's flags) in place of ``sglang.launch_server``; *ray*: with Ray
    on its path (the launch code starts the engine from a Ray actor)."""
    from tools.launcher.engine_server import EngineServer, ensure_engine

    paths = ensure_engine("sglang", REPO, version=version, ray=ray)
    checkpoints, model_args = (), []
    if real_weights:
        checkpoints = make_checkpoints(paths.python, paths.model_dir)
        model_args = ["--load-format", "auto"]
    if module is not None:
        env = {**(env or {}), "PYTHONPATH": launch_code_path(ray)}
    server = EngineServer("sglang", REPO, api_key=API_KEY, extra_args=[*extra_args, *model_args], env=env,
                          log_path=tmp_dir / "sglang.log", version=version, model_dir=checkpoints[0] if checkpoints else None,
                          module=module)
    with server:
        name = name or ("sglang" if version is None else f"sglang@{version}")
        yield Target(name=name, url=server.url, api_key=API_KEY, long_tokens=1500, log_tail=lambda: server.log_path.read_text(errors="replace"), honours_seed=False, real=True,
                     signal=server.server_process.signal, checkpoints=checkpoints,
                     process=server.server_process)


# Data parallelism: ``--dp-size 2`` puts SGLang's data-parallel controller between the
# TokenizerManager and two schedulers. SGLang's CPU path starts more ranks than NUMA nodes (one
# here) only when SGLANG_CPU_OMP_THREADS_BIND gives each rank its cores ("|" between ranks).
DP_SIZE = 2


def dp_threads_bind(ranks: int = DP_SIZE) -> str:
    """SGLANG_CPU_OMP_THREADS_BIND giving each rank one core of its own, the machine's first ones
    (ranks share cores round the machine's when there are fewer cores than ranks)."""
    from tools.launcher.cpu import machine_cores

    cores = machine_cores()
    return "|".join(str(cores[rank % len(cores)]) for rank in range(ranks))


def sglang_dp_server(tmp_dir: Path, ranks: int = DP_SIZE, extra_args: tuple[str, ...] = ()) -> contextlib.AbstractContextManager[Target]:
    """The real SGLang server with *ranks* data-parallel ranks, one core each."""
    return sglang_real_server(tmp_dir, extra_args=(*SGLANG_ARGS, "--dp-size", str(ranks), *extra_args),
                              env={"SGLANG_CPU_OMP_THREADS_BIND": dp_threads_bind(ranks)}, name=f"sglang-dp{ranks}")


# The release AReaL's launch module runs on (see sglang-areal).
AREAL_SGLANG = "0.5.12"

TARGETS = {
    "sglang-stub": lambda tmp: sglang_fake_server(tmp, "--step-s", "0.002", "--tokenize-s", "0.005"),
    # The fake as SGLang 0.5.19: the dispatch-mark shims (its TokenizerManager marks nothing).
    "sglang-0.5.19-stub": lambda tmp: sglang_fake_server(tmp, "--step-s", "0.002", "--tokenize-s", "0.005", "--like-0.5.19",
                                                         name="sglang-0.5.19-stub"),
    # The fake as SGLang 0.5.18: those shims, and the weight version kept and labelled by the plugin.
    "sglang-0.5.18-stub": lambda tmp: sglang_fake_server(tmp, "--step-s", "0.002", "--tokenize-s", "0.005", "--like-0.5.18",
                                                         name="sglang-0.5.18-stub"),
    # The fake as SGLang 0.5.17: 0.5.18's, and an abort that marks request states.
    "sglang-0.5.17-stub": lambda tmp: sglang_fake_server(tmp, "--step-s", "0.002", "--tokenize-s", "0.005", "--like-0.5.17",
                                                         name="sglang-0.5.17-stub"),
    # The fake as SGLang 0.5.16: 0.5.18's, and no config values.
    "sglang-0.5.16-stub": lambda tmp: sglang_fake_server(tmp, "--step-s", "0.002", "--tokenize-s", "0.005", "--like-0.5.16",
                                                         name="sglang-0.5.16-stub"),
    # The fake as SGLang 0.5.12: 0.5.16's, and nothing dropped on a failure before dispatch.
    "sglang-0.5.12-stub": lambda tmp: sglang_fake_server(tmp, "--step-s", "0.002", "--tokenize-s", "0.005", "--like-0.5.12",
                                                         name="sglang-0.5.12-stub"),
    "sglang-stub-dp2": lambda tmp: sglang_fake_server(tmp, "--step-s", "0.002", "--tokenize-s", "0.005", "--dp-size", str(DP_SIZE),
                                                      name="sglang-stub-dp2"),
    "sglang": lambda tmp: sglang_real_server(tmp),
    "sglang-dp2": lambda tmp: sglang_dp_server(tmp),
    # Real weights, for the weight-swap tests, which change them (and the version): a server of their own.
    "sglang-weights": lambda tmp: sglang_real_server(tmp, real_weights=True, name="sglang-weights"),
    # Started as slime, miles and NeMo-RL start it: a spawned child of their Ray actor running
    # launch_server (frameworks/spawned_sglang.py). The smoke subset and those frameworks' calls.
    "sglang-spawned": lambda tmp: sglang_real_server(tmp, name="sglang-spawned", module="frameworks.spawned_sglang", ray=True),
    # Started as AReaL starts it: its own launch module, which calls SGLang's private
    # _launch_subprocesses and _setup_and_run_http_server (frameworks/areal_sglang_server.py), on
    # the supported release nearest AReaL's pin (0.5.10, refused; from 0.5.19 on the first returns
    # one more value than AReaL's code unpacks). The smoke subset and AReaL's calls.
    "sglang-areal": lambda tmp: sglang_real_server(tmp, name="sglang-areal", module="frameworks.areal_sglang_server",
                                                   version=AREAL_SGLANG),
    # Held in-process, as ROLL holds it: sglang.Engine in the server's own process, no SGLang HTTP
    # server; the contract served by engine_plugins.inprocess.attach(engine).app()
    # (frameworks/inprocess_sglang_server.py). The whole contract suite.
    "sglang-inprocess": lambda tmp: sglang_real_server(tmp, name="sglang-inprocess", module="frameworks.inprocess_sglang_server"),
    # Held in-process as verl holds it: its SGLangHttpServer Ray actor calling _launch_subprocesses
    # and serving SGLang's app itself (frameworks/verl_sglang_server.py); verl's calls through the
    # tests' relay (frameworks/inproc_relay.py), no contract route.
    "sglang-verl": lambda tmp: sglang_real_server(tmp, name="sglang-verl", module="frameworks.verl_sglang_server", ray=True),
    # Held as ROLL holds it: sglang.Engine in its strategy's Ray worker (frameworks/roll_sglang_strategy.py).
    "sglang-roll": lambda tmp: sglang_real_server(tmp, name="sglang-roll", module="frameworks.roll_sglang_strategy", ray=True),
}
# The real servers among them (targets.py: fewer, longer rounds; setup reruns).
REAL_TARGETS = {"sglang", "sglang-dp2", "sglang-weights", "sglang-spawned", "sglang-areal", "sglang-inprocess"}
# The frameworks that hold SGLang in-process: only their own tests run there (no route serves the contract).
RELAY_TARGETS = {"sglang-verl", "sglang-roll"}
REAL_TARGETS |= RELAY_TARGETS
DEDICATED_TARGETS = {"sglang-weights", *RELAY_TARGETS}
RELEASE_FAKES = {"sglang-0.5.19-stub", "sglang-0.5.18-stub", "sglang-0.5.17-stub", "sglang-0.5.16-stub", "sglang-0.5.12-stub"}
# Every other release with a CPU build: the smoke subset (engine_versions.SMOKE).
for _release in SUPPORTED:
    if _release.engine == "sglang" and _release.tested == "real":
        TARGETS[str(_release)] = lambda tmp, v=_release.version: sglang_real_server(tmp, version=v)
