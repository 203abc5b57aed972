"""Small FastAPI apps with the native wire shapes of SGLang 0.5.23 and vLLM 0.32's dev-mode
routes, for detection and the client's native paths. Shapes are from the engines' source
(/work/shared/docs/engine-internals.md; vLLM: vllm/entrypoints/rl/online/api_router.py), not
invented; generation is simulated with one token per ``step_s``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response


@dataclass
class FakeRequest:
    rid: str
    max_new_tokens: int
    tokens: int = 0
    aborted: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)


class FakeEngine:
    """Requests that generate a token per step until done or aborted; pause freezes stepping."""

    def __init__(self, step_s: float = 0.005) -> None:
        self.step_s = step_s
        self.requests: dict[str, FakeRequest] = {}
        self.paused: Optional[str] = None
        self.version = "default"
        self.calls: list[tuple[str, Any]] = []  # (route, body) for the tests to read
        self._counter = 0

    async def generate(self, rid: Optional[str], max_new_tokens: int) -> FakeRequest:
        self._counter += 1
        req = FakeRequest(rid or f"fake-{self._counter}", max_new_tokens)
        self.requests[req.rid] = req
        try:
            while not req.aborted and req.tokens < max_new_tokens:
                await asyncio.sleep(self.step_s)
                if self.paused or req.aborted:
                    continue
                req.tokens += 1
        finally:
            del self.requests[req.rid]
        return req

    def abort(self, match) -> int:
        hit = [r for r in self.requests.values() if match(r.rid) and not r.aborted]
        for r in hit:
            r.aborted = True
        return len(hit)


def sglang_app(engine: FakeEngine, legacy_loads: bool = False) -> FastAPI:
    """SGLang 0.5.23's own routes (http_server.py): /generate, /abort_request, /v1/loads (or the
    legacy /get_load), /update_weight_version, /pause_generation, /continue_generation."""
    app = FastAPI()

    @app.post("/generate")
    async def generate(request: Request):
        body = await request.json()
        req = await engine.generate(body.get("rid"), body["sampling_params"]["max_new_tokens"])
        finish = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None} if req.aborted else {"type": "length", "length": req.tokens}
        return {"output_ids": list(range(req.tokens)), "meta_info": {"id": req.rid, "finish_reason": finish, "weight_version": engine.version}}

    @app.post("/abort_request")
    async def abort_request(request: Request):
        # AbortReq{rid="", abort_all=False} (io_struct.py:2285-2296); the scheduler matches by
        # prefix (req.rid.startswith(recv_req.rid), scheduler.py:5675-5813); a bare 200, no count.
        body = await request.json()
        engine.calls.append(("/abort_request", body))
        rid = body.get("rid") or ""
        if body.get("abort_all"):
            engine.abort(lambda r: True)
        elif rid:
            engine.abort(lambda r: r.startswith(rid))
        return Response(status_code=200)

    def ranks() -> list[dict]:
        running = sum(1 for r in engine.requests.values() if not r.aborted)
        return [{"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": 0, "num_used_tokens": 0, "max_running_requests": 64}]

    if legacy_loads:
        @app.get("/get_load")
        async def get_load():
            # GetLoadReqOutput: num_reqs = running + waiting (Scheduler.get_load).
            r = ranks()[0]
            return [{"dp_rank": 0, "num_reqs": r["num_running_reqs"], "num_waiting_reqs": 0, "num_tokens": 0, "ts_tic": 0.0}]
    else:
        @app.get("/v1/loads")
        async def v1_loads(include: Optional[str] = None):
            # v1_loads.py:96-150: no "aggregate" key in 0.5.23.
            return {"timestamp": "2026-01-01T00:00:00+00:00", "version": "0.5.23", "accelerator": "cpu", "num_accelerators": 1, "loads": ranks()}

    @app.post("/update_weight_version")
    async def update_weight_version(request: Request):
        # UpdateWeightVersionReqInput{new_version, abort_all_requests: bool = True} (io_struct.py:2155-2159).
        body = await request.json()
        engine.calls.append(("/update_weight_version", body))
        if body.get("abort_all_requests", True):
            engine.abort(lambda r: True)
        engine.version = body["new_version"]
        return {"success": True, "message": f"Weight version updated to {body['new_version']}", "new_version": body["new_version"]}

    @app.post("/pause_generation")
    async def pause_generation(request: Request):
        body = await request.json()
        engine.calls.append(("/pause_generation", body))
        mode = body.get("mode", "abort")
        if mode == "abort":
            engine.abort(lambda r: True)
        engine.paused = mode
        return {"message": "Generation paused successfully.", "status": "ok"}

    @app.post("/continue_generation")
    async def continue_generation(request: Request):
        engine.calls.append(("/continue_generation", await request.json()))
        engine.paused = None
        return {"message": "Generation continued successfully.", "status": "ok"}

    return app


def vllm_dev_app(engine: FakeEngine, dev_mode: bool = True) -> FastAPI:
    """vLLM 0.32's server: /version, /metrics, /v1/completions, and with dev mode the RL routes
    of rl/online/api_router.py (/pause, /resume, /abort_requests, /is_paused,
    /update_weight_version, /weight_info)."""
    app = FastAPI()

    @app.get("/version")
    async def version():
        return {"version": "0.32.0"}

    @app.get("/metrics")
    async def metrics():
        running = sum(1 for r in engine.requests.values() if not r.aborted)
        return PlainTextResponse(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {float(running)}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="tiny"}} 0.0\n'
            f'vllm:num_requests_waiting_by_reason{{engine="0",model_name="tiny",reason="capacity"}} 7.0\n'
        )

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        req = await engine.generate(body.get("request_id"), body["max_tokens"])
        return {"choices": [{"finish_reason": "abort" if req.aborted else "length", "text": "x" * req.tokens}]}

    if not dev_mode:
        return app

    @app.post("/pause")
    async def pause(mode: str = Query("abort"), clear_cache: bool = Query(True)):
        engine.calls.append(("/pause", {"mode": mode, "clear_cache": clear_cache}))
        if mode not in ("abort", "wait", "keep"):
            return JSONResponse({"error": f"Invalid pause mode: {mode}"}, status_code=400)
        if mode == "abort":
            engine.abort(lambda r: True)
        engine.paused = mode
        # In abort mode vLLM answers once the engine has sent the abort outputs.
        while mode == "abort" and engine.requests:
            await asyncio.sleep(engine.step_s)
        return {"status": "paused"}

    @app.post("/resume")
    async def resume():
        engine.calls.append(("/resume", None))
        engine.paused = None
        return {"status": "resumed"}

    @app.post("/abort_requests")
    async def abort_requests(request: Request):
        try:
            body = await request.json()  # an empty body is a 400 in vLLM (raw_request.json())
        except json.JSONDecodeError:
            return JSONResponse({"detail": "Invalid JSON format"}, status_code=400)
        engine.calls.append(("/abort_requests", body))
        ids = body.get("request_ids")
        if ids:
            engine.abort(lambda r: r in ids)
        else:
            ids = list(engine.requests)
            engine.abort(lambda r: True)
        return {"status": "aborted", "aborted": len(ids)}

    @app.get("/is_paused")
    async def is_paused():
        return {"is_paused": engine.paused is not None}

    @app.post("/update_weight_version")
    async def update_weight_version(request: Request):
        body = await request.json()
        engine.calls.append(("/update_weight_version", body))
        engine.version = body["new_version"]  # never aborts
        return {"success": True, "new_version": body["new_version"]}

    @app.get("/weight_info")
    async def weight_info():
        return {"weight_version": engine.version}

    return app


def failing_app() -> FastAPI:
    """Answers 500 to everything, as a server whose engine died."""
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def everything(path: str):
        return JSONResponse({"error": {"message": "engine core died", "type": "internal_error"}}, status_code=500)

    return app
