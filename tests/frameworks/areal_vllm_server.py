"""vLLM started as AReaL starts it: its own server module, run by ``subprocess.Popen``, which adds
AReaL's pause and continue routes and a ``/v1/completions`` that waits while paused to vLLM's app
(``build_app`` wrapped), then runs vLLM's ``run_server``: neither ``vllm serve`` nor vLLM's
server module.

    python -m frameworks.areal_vllm_server [vLLM's serve flags]

Source: inclusionAI/AReaL at commit 4aef98d8d818af55b43621aaadba047ae10f4e77:

- ``areal/engine/vllm_remote.py:255-274`` (``VLLMBackend.launch_server``): ``subprocess.Popen`` of
  ``vLLMConfig.build_cmd_from_args``, ``python3 -m areal.engine.vllm_ext.areal_vllm_server`` with
  its config as flags (``areal/api/cli_args.py:1606-1621, 1708-1710``).
- ``areal/engine/vllm_ext/areal_vllm_server.py``:

  - ``:31-33``: a module-level ``asyncio.Event``, set (not paused);
  - ``:309-321``: ``POST /areal_pause_generation``: the event cleared, then the engine client's
    ``pause_generation(wait_for_inflight_requests=False, clear_cache=True)`` (every running and
    waiting request aborted) and ``reset_mm_cache()``; ``{"success": true, "message": ...}``
    (``to_json_response``, ``:90-95``);
  - ``:324-330``: ``POST /areal_continue_generation``: ``resume_generation()``, the event set;
  - ``:333-359``: its ``POST /v1/completions``, under vLLM's ``with_cancellation`` and
    ``load_aware_call``: waits for the event, then calls vLLM's own ``create_completion``;
  - ``:362-400``: ``__main__``: ``build_app`` wrapped to drop vLLM's ``POST /v1/completions`` and
    include AReaL's router; ``cli_env_setup()``, vLLM's parser, ``validate_parsed_serve_args``,
    ``uvloop.run(run_server(args))``.

Left out: its weight-update routes (``/areal_update_weights`` and its LoRA and XCCL variants,
which pause, call its worker extension through ``collective_rpc`` and resume;
``/areal_init_weights_update_group`` and ``/areal_set_update_weight_meta*``, NCCL on GPUs), its
runtime LoRA name registration and its worker extension (``--worker-extension-cls``): none has a
CPU path here. Before AReaL's commit 6113c0225 (March 2026) its pause called an engine-core
utility of its own, ``abort_all_reqs``, set on vLLM's ``EngineCore``; that is not this code.

Changed for vLLM 0.32: AReaL pins vLLM 0.19.1, below the plugin's range (0.26 on), and imports
from where 0.19 had them; here from 0.32's modules (``launchers.cli_args``,
``serve.utils.api_utils``, ``serve.engine.protocol``). Its pause passes ``mode="abort"`` for
``wait_for_inflight_requests=False``, a keyword 0.32 removed (0.26 to 0.31 still take it, as a
deprecated way of saying abort unless true). ``build_app`` is wrapped where 0.32's ``run_server``
looks it up (``vllm.entrypoints.launchers.api_server.entry``): AReaL wraps it in
``vllm.entrypoints.openai.api_server``, which in 0.32 only re-exports it. The plugin reaches the
process through ``VLLM_PLUGINS``, which the test server sets.
"""

# No ``from __future__ import annotations``: FastAPI reads the completions handler's annotations
# through vLLM's decorators, in their module, where a string annotation would not resolve.

import asyncio
from http import HTTPStatus

import uvloop
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from vllm.entrypoints.launchers.api_server import entry
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.entrypoints.openai.completion.api_router import create_completion as original_create_completion
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.serve.engine.protocol import ErrorResponse
from vllm.entrypoints.serve.utils.api_utils import cli_env_setup, load_aware_call, validate_json_request, with_cancellation
from vllm.utils.argparse_utils import FlexibleArgumentParser

router = APIRouter()

# AReaL's pause flag: its pause clears it, its continue sets it, its /v1/completions waits for it.
_generation_run_event = asyncio.Event()
_generation_run_event.set()


def to_json_response(success: bool, message: str) -> JSONResponse:
    """AReaL's answer: ``{"success", "message"}``, 200 or 400."""
    return JSONResponse({"success": success, "message": message}, status_code=200 if success else 400)


@router.post("/areal_pause_generation")
async def areal_pause_generation(raw_request: Request) -> JSONResponse:
    """AReaL's pause: new completions wait; every running and waiting request is aborted."""
    llm = raw_request.app.state.engine_client
    _generation_run_event.clear()
    # AReaL: wait_for_inflight_requests=False (abort), a keyword vLLM 0.32 no longer takes.
    await llm.pause_generation(mode="abort", clear_cache=True)
    await llm.reset_mm_cache()
    return to_json_response(True, "Generation paused and all requests aborted")


@router.post("/areal_continue_generation")
async def areal_continue_generation(raw_request: Request) -> JSONResponse:
    """AReaL's continue: the engine resumes, then waiting completions go on."""
    llm = raw_request.app.state.engine_client
    await llm.resume_generation()
    _generation_run_event.set()
    return to_json_response(True, "Generation continued")


@router.post(
    "/v1/completions",
    dependencies=[Depends(validate_json_request)],
    responses={
        HTTPStatus.OK.value: {"content": {"text/event-stream": {}}},
        HTTPStatus.BAD_REQUEST.value: {"model": ErrorResponse},
        HTTPStatus.NOT_FOUND.value: {"model": ErrorResponse},
        HTTPStatus.INTERNAL_SERVER_ERROR.value: {"model": ErrorResponse},
    },
)
@with_cancellation
@load_aware_call
async def create_completion(request: CompletionRequest, raw_request: Request):
    """AReaL's completions: wait while paused, then vLLM's own."""
    if not _generation_run_event.is_set():
        await _generation_run_event.wait()
    return await original_create_completion(request, raw_request)


def areal_build_app(args, supported_tasks=None, model_config=None):
    """vLLM's ``build_app`` without its ``POST /v1/completions``, with AReaL's router."""
    app = entry._areal_build_app(args, supported_tasks=supported_tasks, model_config=model_config)
    app.router.routes = [
        route for route in app.router.routes
        if not (getattr(route, "path", None) == "/v1/completions" and "POST" in (getattr(route, "methods", None) or ()))
    ]
    app.include_router(router)
    return app


if __name__ == "__main__":
    entry._areal_build_app = entry.build_app
    entry.build_app = areal_build_app
    cli_env_setup()
    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    args = parser.parse_args()
    validate_parsed_serve_args(args)
    uvloop.run(entry.run_server(args))
