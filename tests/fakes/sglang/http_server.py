"""The fake ``sglang.srt.entrypoints.http_server``: a module-level app with SGLang's own routes.

Like SGLang's, ``/v1/loads`` comes from an included router (``http_server.py:519-523``) and
``/update_weight_version`` aborts every request unless told not to (1527-1556), so the plugin's
route replacement and its fixes are exercised. Run ``python -m fakes.sglang``.

``GET /fake/calls`` lists the bodies SGLang's control routes received, for the client tests
(not an SGLang route).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Optional

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from .io_struct import (BeginWeightUpdateReqInput, ContinueGenerationReqInput, EndWeightUpdateReqInput, GenerateReqInput,
                        PauseGenerationReqInput, UpdateWeightFromDiskReqInput, UpdateWeightsFromTensorReqInput,
                        UpdateWeightVersionReqInput)


@dataclass
class _GlobalState:
    tokenizer_manager: Any


_global_state: Optional[_GlobalState] = None
_calls: list[tuple[str, Any]] = []


def set_global_state(state: _GlobalState) -> None:
    """As SGLang's (233-235)."""
    global _global_state
    _global_state = state


def get_global_state() -> Optional[_GlobalState]:
    """As SGLang's (238-239): None until the server has set it."""
    return _global_state


app = FastAPI()
v1_loads_router = APIRouter()


@v1_loads_router.get("/v1/loads")
async def get_loads(include: Optional[str] = None) -> dict:
    """SGLang's native loads (``v1_loads.py:96-150``): no ``aggregate`` in 0.5.23, no contract fields."""
    loads = await _global_state.tokenizer_manager.get_loads()
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "version": "0.5.23",
        "accelerator": "cpu",
        "num_accelerators": 1,
        "loads": [load.to_dict(None) for load in loads],
    }


async def get_load() -> list:
    """An older SGLang's ``/get_load`` (``GetLoadReqOutput``): ``num_reqs`` is running + waiting."""
    loads = await _global_state.tokenizer_manager.get_loads()
    return [
        {"dp_rank": load.dp_rank, "num_reqs": load.num_running_reqs + load.num_waiting_reqs,
         "num_waiting_reqs": load.num_waiting_reqs, "num_tokens": load.num_used_tokens, "ts_tic": 0.0}
        for load in loads
    ]


app.include_router(v1_loads_router)


@app.get("/health")
async def health() -> dict:
    """Liveness."""
    return {"status": "ok"}


@app.get("/fake/calls")
async def fake_calls() -> list:
    """What SGLang's control routes received, in order."""
    return _calls


@app.api_route("/generate", methods=["POST", "PUT"])
async def generate_request(request: Request) -> Any:
    """SGLang's native /generate (927-1015): stream as SSE, or the final output."""
    body = await request.json()
    obj = GenerateReqInput(**body)
    tm = _global_state.tokenizer_manager
    if obj.stream:
        async def chunks():
            try:
                async for out in tm.generate_request(obj, request):
                    yield f"data: {json.dumps(out)}\n\n"
            except ValueError as exc:  # a refused request is the stream's one event (955-975)
                error = {"message": str(exc), "type": "invalid_request_error", "code": 400, "retryable": False}
                yield f"data: {json.dumps({'error': error})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")
    try:
        return await tm.generate_request(obj, request).__anext__()
    except ValueError as exc:
        return JSONResponse({"error": {"message": str(exc)}}, status_code=400)


@app.post("/update_weight_version")
async def update_weight_version(request: Request) -> Any:
    """SGLang's native route: aborts every request by default. Before 0.5.19 it only records the
    TokenizerManager's config value (0.5.18 ``entrypoints/http_server.py:1432-1463``)."""
    body = await request.json()
    _calls.append(("/update_weight_version", body))
    obj = UpdateWeightVersionReqInput(**body)
    tm = _global_state.tokenizer_manager
    if obj.abort_all_requests:
        tm.abort_request(abort_all=True)
    if hasattr(tm, "update_weight_version"):
        await tm.update_weight_version(obj)
    elif hasattr(tm, "record_config_updates"):
        tm.record_config_updates("http.update_weight_version", weight_version=obj.new_version)
    else:  # 0.5.16: the server args (entrypoints/http_server.py:1381-1383)
        tm.server_args.override("http.update_weight_version", weight_version=obj.new_version)
    return {"success": True, "message": f"Weight version updated to {obj.new_version}", "new_version": obj.new_version}


@app.post("/abort_request")
async def abort_request(request: Request) -> Any:
    """SGLang's native abort (1721-1731): a bare 200."""
    body = await request.json()
    _calls.append(("/abort_request", body))
    _global_state.tokenizer_manager.abort_request(body.get("rid", ""), body.get("abort_all", False))
    return JSONResponse({})


@app.post("/pause_generation")
async def pause_generation(request: Request) -> Any:
    """SGLang's native pause (1831-1841)."""
    body = await request.json()
    _calls.append(("/pause_generation", body))
    await _global_state.tokenizer_manager.pause_generation(PauseGenerationReqInput(**body))
    return {"message": "Generation paused successfully.", "status": 200}


@app.post("/continue_generation")
async def continue_generation(request: Request) -> Any:
    """SGLang's native continue (1844-1856)."""
    _calls.append(("/continue_generation", await request.json()))
    await _global_state.tokenizer_manager.continue_generation(ContinueGenerationReqInput())
    return {"message": "Generation continued successfully.", "status": 200}


def _weights_answer(success: bool, message: str, **extra: Any) -> JSONResponse:
    """SGLang's weight routes (1300-1330, 1436-1520): 200 on success, else 400, with the message."""
    return JSONResponse({"success": success, "message": message, **extra}, status_code=200 if success else 400)


@app.post("/update_weights_from_disk")
async def update_weights_from_disk(request: Request) -> Any:
    """SGLang's native route (1300-1330)."""
    body = await request.json()
    _calls.append(("/update_weights_from_disk", body))
    success, message, paused = await _global_state.tokenizer_manager.update_weights_from_disk(UpdateWeightFromDiskReqInput(**body), request)
    return _weights_answer(success, message, num_paused_requests=paused)


@app.post("/update_weights_from_tensor")
async def update_weights_from_tensor(request: Request) -> Any:
    """SGLang's native route (1436-1455)."""
    body = await request.json()
    _calls.append(("/update_weights_from_tensor", {k: v for k, v in body.items() if k != "serialized_named_tensors"}))
    success, message = await _global_state.tokenizer_manager.update_weights_from_tensor(UpdateWeightsFromTensorReqInput(**body), request)
    return _weights_answer(success, message)


@app.post("/begin_weight_update")
async def begin_weight_update(request: Request) -> Any:
    """SGLang's native route (1458-1470)."""
    _calls.append(("/begin_weight_update", await request.json()))
    return _weights_answer(*await _global_state.tokenizer_manager.begin_weight_update(BeginWeightUpdateReqInput(), request))


@app.post("/end_weight_update")
async def end_weight_update(request: Request) -> Any:
    """SGLang's native route (1473-1485)."""
    _calls.append(("/end_weight_update", await request.json()))
    return _weights_answer(*await _global_state.tokenizer_manager.end_weight_update(EndWeightUpdateReqInput(), request))


@app.get("/model_info")
async def model_info() -> Any:
    """SGLang's route (812-835): the fields the tests read."""
    tm = _global_state.tokenizer_manager
    # 0.5.16 reads the server args (entrypoints/http_server.py:712)
    version = tm.server_args.weight_version if not hasattr(tm, "config_value") else tm.config_value("weight_version")
    return {"model_path": tm.scheduler.weights, "weight_version": version}


@app.get("/server_info")
async def server_info() -> Any:
    """SGLang's route (863-890): its server args and its version; the fields the client reads."""
    tm = _global_state.tokenizer_manager
    return {"model_path": tm.scheduler.weights, "tp_size": 1, "version": "0.5.23"}


@app.get("/fake/scheduler")
async def scheduler_state() -> Any:
    """The first rank's weights and flush count (not an SGLang route)."""
    scheduler = _global_state.tokenizer_manager.scheduler
    return {"weights": scheduler.weights, "flushes": scheduler.flushes, "weight_version": scheduler.weight_version}


def launch_server(server_args: Any) -> None:
    """As SGLang's (3125): build the TokenizerManager, set the global state, serve.

    ``server_args.legacy_loads``: serve an older SGLang's ``/get_load`` instead of ``/v1/loads``.
    ``server_args.like``: the SGLang release whose TokenizerManager (and ``/get_load``) the fake
    follows, ``0.5.19``, ``0.5.18``, ``0.5.17``, ``0.5.16`` or ``0.5.12``; None for 0.5.23.
    """
    import uvicorn

    from .tokenizer_manager import (TokenizerManager, TokenizerManager0512, TokenizerManager0516, TokenizerManager0517,
                                    TokenizerManager0518, TokenizerManager0519)

    like = getattr(server_args, "like", None)
    if like or getattr(server_args, "legacy_loads", False):
        v1_loads_router.routes.clear()
        getattr(v1_loads_router, "_mark_routes_changed", lambda: None)()  # FastAPI caches included routes
        app.add_api_route("/get_load", get_load, methods=["GET"])
    if server_args.api_key or server_args.admin_api_key:  # 2886-2898
        from .auth import add_api_key_middleware

        add_api_key_middleware(app, server_args.api_key, server_args.admin_api_key)
    tm = {"0.5.12": TokenizerManager0512, "0.5.16": TokenizerManager0516, "0.5.17": TokenizerManager0517, "0.5.18": TokenizerManager0518, "0.5.19": TokenizerManager0519}.get(like, TokenizerManager)(step_s=server_args.step_s, tokenize_s=server_args.tokenize_s, deterministic=server_args.enable_deterministic_inference,
                          dp_size=server_args.dp_size, aborted_answer_delay_s=server_args.aborted_answer_delay_s)
    set_global_state(_GlobalState(tokenizer_manager=tm))
    uvicorn.run(app, host=server_args.host, port=server_args.port, log_level="warning")
