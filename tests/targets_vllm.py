"""vLLM contract targets: ``vllm-stub`` (the real plugin on a fake AsyncLLM), ``vllm-0.34-stub``
(the same fake as vLLM 0.34: 0.33's pause, the process checkpoint routes), ``vllm-0.26-stub`` and
``vllm-0.26-stub-api3`` (as vLLM 0.26: no weight version in the engine, one and three front ends), ``vllm-stub-api3`` (three fake front ends on one engine
core), ``vllm`` (a real vLLM 0.32, the pinned release), ``vllm-api2`` (the same with two API
server processes) and
``vllm@VERSION`` for every other release with a CPU build (requirements/engine-versions.txt),
which run the smoke subset (engine_versions.SMOKE) in dev mode, so that vLLM's own RL routes are
there for the contract's to replace; ``vllm-skyrl`` is the pinned vLLM served from a Ray actor as
SkyRL's ``VLLMServerActor`` serves it (the smoke subset and SkyRL's calls), ``vllm-prime-rl`` as
prime-rl's server starts it, with two API processes (the smoke subset and prime-rl's calls), and
``vllm-areal`` as AReaL's server module starts it (the smoke subset and AReaL's calls), and
``vllm-inprocess`` held in-process with no vLLM app, the contract served from
``engine_plugins.inprocess.attach(llm).app()`` (the whole contract suite)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from engine_versions import SUPPORTED
from targets import API_KEY, REPO, TESTS, Target, launch_code_path, make_checkpoints, module_server

# The test-only weight-transfer backend's worker extension (its module is under tests/).
FILE_TRANSFER_EXTENSION = "swap.file_transfer.FileTransferWorkerExtension"


@contextlib.contextmanager
def fake_vllm_server(tmp_dir: Path, *args: str, api_key: str = API_KEY, env: dict | None = None,
                     name: str = "vllm-stub") -> Iterator[Target]:
    """The fake AsyncLLM with the real plugin, served by uvicorn in its own process."""
    with module_server(tmp_dir, "fakes.vllm", "--api-key", api_key, *args, env=env) as server:
        yield Target(name=name, url=server.url, api_key=api_key, long_tokens=1500, log_tail=server.log_tail, signal=server.signal,
                     process=server)


@contextlib.contextmanager
def real_vllm_server(tmp_dir: Path, *extra_args: str, env: dict | None = None, api_key: str = API_KEY,
                     version: str | None = None, name: str | None = None, real_weights: bool = False,
                     module: str | None = None, ray: bool = False) -> Iterator[Target]:
    """A real vLLM (CPU) OpenAI server with VLLM_PLUGINS=engine_plugins and --api-key: the pinned
    0.32, or *version* from its layered venv. *real_weights*: serve checkpoint A of two made now
    (the target's ``checkpoints``) instead of random weights. *module*: a framework's launch code
    under tests/ (run with ``python -m``, vLLM's flags) in place of vLLM's server module; *ray*:
    with Ray on its path (the launch code starts the engine in a Ray actor)."""
    from tools.launcher.engine_server import EngineServer, ensure_engine

    paths = ensure_engine("vllm", REPO, version=version, ray=ray)
    checkpoints: tuple[Path, ...] = ()
    if real_weights:
        checkpoints = make_checkpoints(paths.python, paths.model_dir)
        extra_args = (*extra_args, "--load-format", "auto")
    server_env = {"VLLM_PLUGINS": "engine_plugins", **(env or {})}
    if module is not None:
        server_env["PYTHONPATH"] = launch_code_path(ray)
    # long_tokens: about 7 s of generation for one request with the tiny model, longer than the
    # stalls a client sees on two busy cores, so no request finishes while a test arranges things.
    name = name or ("vllm" if version is None else f"vllm@{version}")
    with EngineServer("vllm", REPO, api_key=api_key, env=server_env, extra_args=extra_args,
                      log_path=tmp_dir / "vllm.log", version=version, model_dir=checkpoints[0] if checkpoints else None,
                      module=module) as server:
        # The other servers: the whole log, which their startup-log tests read.
        yield Target(name=name, url=server.url, api_key=api_key, long_tokens=1500, real=True,
                     log_tail=lambda: server.log_tail(80 if name == "vllm" else 1_000_000),
                     signal=server.server_process.signal, checkpoints=checkpoints,
                     process=server.server_process, engine_app=name not in IN_PROCESS_TARGETS)


def inproc_vllm_server(tmp_dir: Path, name: str, module: str) -> contextlib.AbstractContextManager[Target]:
    """The pinned vLLM held in-process by a framework's launch code (frameworks/*: a Ray actor, or
    TRL's trainer process), which serves the tests' relay to the framework's own methods
    (frameworks/inproc_relay.py) instead of an engine route; real weights (checkpoint A), and
    ``FRAMEWORK_WEIGHTS_DIR`` naming checkpoint B, the weights its weight update loads."""
    from tools.launcher.engine_server import ensure_engine

    paths = ensure_engine("vllm", REPO, ray=True)
    weights_b = make_checkpoints(paths.python, paths.model_dir)[1]
    return real_vllm_server(tmp_dir, name=name, module=module, ray=True, real_weights=True,
                            env={"FRAMEWORK_WEIGHTS_DIR": str(weights_b)})


TARGETS = {
    "vllm-stub": lambda tmp: fake_vllm_server(tmp),
    # vLLM 0.34, which is 0.33 (its pause rejects new requests) with the process checkpoint,
    # mounted by --enable-sleep-mode: the full suite runs with those routes there.
    "vllm-0.34-stub": lambda tmp: fake_vllm_server(tmp, "--like-0.34", "--enable-sleep-mode", "--dev-mode", name="vllm-0.34-stub"),
    # vLLM 0.26: 0.31's shims and the plugin weight version (no AsyncLLM.update_weight_version),
    # the full suite; with three front ends, the version is one across the API processes.
    "vllm-0.26-stub": lambda tmp: fake_vllm_server(tmp, "--like-0.26", "--dev-mode", name="vllm-0.26-stub"),
    "vllm-0.26-stub-api3": lambda tmp: fake_vllm_server(tmp, "--like-0.26", "--api-server-count", "3", "--dev-mode",
                                                        name="vllm-0.26-stub-api3"),
    # The smoke subset only (engine_versions.SMOKE_ONLY), as on the real 0.30 and 0.31.
    "vllm-0.31-stub": lambda tmp: fake_vllm_server(tmp, "--like-0.31", "--dev-mode", name="vllm-0.31-stub"),
    # Three front ends (API server processes) on one engine core and one port.
    "vllm-stub-api3": lambda tmp: fake_vllm_server(tmp, "--api-server-count", "3", "--dev-mode", name="vllm-stub-api3"),
    "vllm": lambda tmp: real_vllm_server(tmp),
    # Two API server processes (vLLM's default with --data-parallel-size 2) on one engine core.
    # Dev mode: each process's contract routes replace vLLM's RL routes of the same paths.
    "vllm-api2": lambda tmp: real_vllm_server(tmp, "--api-server-count", "2", env={"VLLM_SERVER_DEV_MODE": "1"}, name="vllm-api2"),
    # Started as SkyRL starts it: its VLLMServerActor, a Ray actor running build_app,
    # AsyncLLMEngine, init_app_state and uvicorn (frameworks/skyrl_vllm_server.py). The smoke
    # subset and SkyRL's calls.
    "vllm-skyrl": lambda tmp: real_vllm_server(tmp, name="vllm-skyrl", module="frameworks.skyrl_vllm_server", ray=True),
    # Started as prime-rl's server starts it: its routes on vLLM's app, then vLLM's
    # run_multi_api_server from its own process (frameworks/prime_rl_vllm_server.py), with two API
    # processes. The smoke subset and prime-rl's calls, and a bump and abort over both processes.
    "vllm-prime-rl": lambda tmp: real_vllm_server(tmp, "--api-server-count", "2", name="vllm-prime-rl",
                                                  module="frameworks.prime_rl_vllm_server"),
    # Started as AReaL starts it: its server module (frameworks/areal_vllm_server.py), AReaL's
    # pause, continue and pause-waiting /v1/completions on vLLM's app, then vLLM's run_server.
    # The smoke subset and AReaL's calls.
    "vllm-areal": lambda tmp: real_vllm_server(tmp, name="vllm-areal", module="frameworks.areal_vllm_server"),
    # Held in-process as verl, OpenRLHF, NeMo-RL and ROLL hold it: AsyncLLM.from_engine_args and
    # no vLLM app; the contract served from engine_plugins.inprocess.attach(llm).app()
    # (frameworks/inprocess_vllm_server.py). The whole contract suite.
    "vllm-inprocess": lambda tmp: real_vllm_server(tmp, name="vllm-inprocess", module="frameworks.inprocess_vllm_server"),
    # Held in-process as OpenRLHF holds it: AsyncLLMEngine in its RolloutRayActor, no HTTP server
    # (frameworks/openrlhf_vllm_engine.py); OpenRLHF's calls through the tests' relay.
    "vllm-openrlhf": lambda tmp: inproc_vllm_server(tmp, "vllm-openrlhf", "frameworks.openrlhf_vllm_engine"),
    # Held as NeMo-RL's async generation worker holds it: AsyncLLM in a Ray actor
    # (frameworks/nemo_rl_vllm_worker.py); NeMo-RL's calls through the tests' relay.
    "vllm-nemo-rl": lambda tmp: inproc_vllm_server(tmp, "vllm-nemo-rl", "frameworks.nemo_rl_vllm_worker"),
    # Held as verl's vLLMHttpServer holds it: AsyncLLM, build_app, init_app_state and uvicorn in a
    # Ray actor (frameworks/verl_vllm_server.py); verl's aborts and collective_rpc through the relay.
    "vllm-verl": lambda tmp: inproc_vllm_server(tmp, "vllm-verl", "frameworks.verl_vllm_server"),
    # Two data-parallel ranks (two engine cores, each with its worker on the engine's core) and
    # vLLM's default of one API process per rank. Its start alone takes about 3 minutes on two
    # cores, so it runs only when named (OPT_IN_TARGETS).
    "vllm-dp2": lambda tmp: real_vllm_server(tmp, "--data-parallel-size", "2", env={"VLLM_CPU_OMP_THREADS_BIND": "0|0"}, name="vllm-dp2"),
    # Real weights, for the weight-swap tests, which change them (and the version): a server of
    # their own, in dev mode for vLLM's /collective_rpc and its weight-transfer routes, whose
    # backend is the tests' "file" (tests/swap/file_transfer.py: the CPU build has neither NCCL
    # nor CUDA IPC), registered in the worker by the import of its worker extension.
    "vllm-weights": lambda tmp: real_vllm_server(
        tmp, "--worker-extension-cls", FILE_TRANSFER_EXTENSION, "--weight-transfer-config", '{"backend": "file"}',
        env={"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": str(TESTS)}, real_weights=True, name="vllm-weights"),
}
OPT_IN_TARGETS = {"vllm-dp2"}
# Engines held in-process, the contract served by engine_plugins.inprocess (no vLLM app).
IN_PROCESS_TARGETS = {"vllm-inprocess"}
REAL_TARGETS = {"vllm", "vllm-api2", "vllm-dp2", "vllm-weights", "vllm-skyrl", "vllm-prime-rl", "vllm-areal", "vllm-inprocess"}
# The frameworks that hold vLLM in-process: only their own tests run there, through the tests'
# relay to the framework's methods (no route serves the contract).
RELAY_TARGETS = {"vllm-openrlhf", "vllm-nemo-rl", "vllm-verl"}
REAL_TARGETS |= RELAY_TARGETS
DEDICATED_TARGETS = {"vllm-weights", *RELAY_TARGETS}
RELEASE_FAKES = {"vllm-0.34-stub", "vllm-0.26-stub", "vllm-0.26-stub-api3", "vllm-0.31-stub"}
for _release in SUPPORTED:
    if _release.engine == "vllm" and _release.tested == "real":
        TARGETS[str(_release)] = lambda tmp, v=_release.version: real_vllm_server(
            tmp, env={"VLLM_SERVER_DEV_MODE": "1"}, version=v)
