"""vLLM started as prime-rl's inference server starts it: prime-rl's own routes added to vLLM's
app, then, in the same process, vLLM's ``run_multi_api_server`` (``--api-server-count`` above 1)
or ``run_server`` (one API process): neither ``vllm serve`` nor vLLM's server module.

    python -m frameworks.prime_rl_vllm_server [vLLM's serve flags]

Source: PrimeIntellect-ai/prime-rl at commit 559b44772e471d1538537b8805cc77f3824a5e64,
``src/prime_rl/inference/vllm/server.py``:

- ``:70-87``: its own routes ``POST /pause`` (``engine_client.pause_generation(mode="keep",
  clear_cache=False)``, ``{"status": "paused"}``), ``POST /resume`` (``resume_generation()``,
  ``{"status": "resumed"}``) and ``POST /update_weights`` (``collective_rpc("update_weights_from_path",
  args=(weight_dir,))``, ``{"status": "ok"}``), on a router of its own;
- ``:186-207``: ``build_app`` wrapped to include that router, and vLLM's
  ``run_api_server_worker_proc`` wrapped to import the module again in each spawned API process
  (so the wrapped ``build_app`` is the one there too);
- ``:213-242``: ``server(config)``: vLLM's ``make_arg_parser`` and ``validate_parsed_serve_args``,
  then ``run_headless`` (not here), ``run_multi_api_server(args)`` with ``api_server_count > 1``,
  else ``uvloop.run(run_server(args))``; before it, ``src/prime_rl/inference/server.py:10-11``
  sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` unless set.

Left out: its other routes (``/load_lora_adapter``, ``/liveness``, ``/init_broadcaster``), its
``init_app_state`` wrapper (its token-serving state), its vLLM monkey patches (model-specific
fixes), its worker extension (``--worker-extension-cls``: ``/update_weights`` is mounted but has no
worker method to call here, and no test calls it)
and its config (the flags come from the command line; ``api_server_count`` defaults to 1, as in
its ``InferenceConfig``). Changed for vLLM 0.32: the argument parser is
``vllm.entrypoints.launchers.cli_args`` (``vllm.entrypoints.openai.cli_args`` before 0.32), and
``build_app`` is wrapped where 0.32's ``build_and_serve`` looks it up
(``vllm.entrypoints.launchers.api_server.entry``); prime-rl wraps it in
``vllm.entrypoints.openai.api_server``, which in 0.32 only re-exports it. The plugin reaches these
processes through ``VLLM_PLUGINS`` in the environment, which the test server sets.
"""

from __future__ import annotations

import os
import sys
from argparse import Namespace

from fastapi import APIRouter, Request

router = APIRouter()


def engine_client(request: Request):
    """The app's engine client, as prime-rl reads it."""
    return request.app.state.engine_client


@router.post("/pause")
async def pause(request: Request) -> dict:
    """prime-rl's pause: keep mode, the cache kept."""
    await engine_client(request).pause_generation(mode="keep", clear_cache=False)
    return {"status": "paused"}


@router.post("/resume")
async def resume(request: Request) -> dict:
    """prime-rl's resume."""
    await engine_client(request).resume_generation()
    return {"status": "resumed"}


@router.post("/update_weights")
async def update_weights(request: Request) -> dict:
    """prime-rl's in-place load: its worker extension reads the folder."""
    data = await request.json()
    await engine_client(request).collective_rpc("update_weights_from_path", args=(data.get("weight_dir"),))
    return {"status": "ok"}


def custom_build_app(args: Namespace, supported_tasks: tuple, model_config=None):
    """vLLM's ``build_app`` with prime-rl's router included."""
    from vllm.entrypoints.launchers.api_server import entry

    app = entry._prime_rl_build_app(args, supported_tasks, model_config)
    app.include_router(router)
    return app


def custom_run_api_server_worker_proc(listen_address, sock, args, client_config=None, **uvicorn_kwargs) -> None:
    """The spawned API process's entry: import this module (its wraps), then vLLM's."""
    import vllm.v1.utils

    import frameworks.prime_rl_vllm_server  # noqa: F401  (the wraps, in the spawned child)

    vllm.v1.utils._prime_rl_worker_proc(listen_address, sock, args, client_config, **uvicorn_kwargs)


def _install() -> None:
    """prime-rl's two wraps, at import in the parent and again in each API process. The
    originals are kept on vLLM's modules, as the module may be imported twice in one process
    (``-m`` runs it as ``__main__``, the API process's entry imports it by name)."""
    import vllm.v1.utils
    from vllm.entrypoints.launchers.api_server import entry

    if not hasattr(entry, "_prime_rl_build_app"):
        entry._prime_rl_build_app = entry.build_app
        vllm.v1.utils._prime_rl_worker_proc = vllm.v1.utils.run_api_server_worker_proc
    entry.build_app = custom_build_app
    vllm.v1.utils.run_api_server_worker_proc = custom_run_api_server_worker_proc


# Every process vLLM spawns runs this module again as __mp_main__ (multiprocessing's spawn runs
# the parent's main module first): only the API processes need the wraps, which they apply
# when their entry imports the module by name, so the engine core and its workers are spared
# the API server's imports, which slow the target's start on one busy core.
if __name__ != "__mp_main__":
    _install()


def server(argv: list[str]) -> None:
    """prime-rl's ``server``, for vLLM's flags in *argv*."""
    import uvloop
    from vllm.entrypoints.cli.serve import run_multi_api_server
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.entrypoints.openai.api_server import run_server
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    args = parser.parse_args(argv)
    validate_parsed_serve_args(args)
    if args.api_server_count is None:
        args.api_server_count = 1  # prime-rl's InferenceConfig default
    if args.api_server_count > 1:
        run_multi_api_server(args)
    else:
        uvloop.run(run_server(args))


if __name__ == "__main__":
    # prime-rl's setup_vllm_env, before its server starts vLLM.
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    server(sys.argv[1:])
