"""Serve the fake ``AsyncLLM`` the way vLLM 0.32's OpenAI server does, with the REAL plugin.

``python -m fakes.vllm --port P --api-key K [--dev-mode] [--no-plugin]``

The app is built in vLLM's order (entrypoints/launchers/app.py:19-56): native routes, then the
endpoint plugin's ``attach_router`` with vLLM's replacement rule
(plugins/endpoint_plugins/interface.py:97-146), then the ``--api-key`` middleware that guards
only ``/v1``, ``/v2``, ``/inference`` and ``/cohere`` (serve/middleware/authenticate.py); the
plugin's ``init_state`` runs before serving (launchers/api_server/entry.py:137-138). The plugin
and the general plugin's engine-core utility are the real ones; only vLLM is fake.

With ``--no-plugin`` it is vLLM without this package (``--dev-mode``: with its RL routes).
``GET /fake/calls`` lists the bodies the dev-mode control routes received, for the client tests.
With ``--api-server-count N``, ``POST /fake/peer_fault`` makes one front end fail its peer calls
(see :func:`_peer_faults`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import uuid
from argparse import Namespace
from contextlib import asynccontextmanager, contextmanager
from copy import copy
from typing import Any, Optional

import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.routing import APIRoute

from engine_plugins.fanout import peers
from engine_plugins.engines.vllm import engine_core
from engine_plugins.engines.vllm.facade import VllmNames, check_names
from engine_plugins.engines.vllm.plugin import VllmEndpointPlugin

from . import engine as fake

GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")

logger = logging.getLogger(__name__)


def fake_names(pause_rejects_new: bool = False, like_031: bool = False, like_034: bool = False,
               like_026: bool = False) -> VllmNames:
    """The fake's stand-ins for the vLLM names the plugin imports, checked as vLLM's are (against
    the plugin's manifest); with
    *pause_rejects_new*, those of vLLM 0.33 (its paused engine core's rejection); with
    *like_031*, those of vLLM 0.31 (no spans, no call_utility_all_async); with *like_034*, 0.34's
    (0.33's, and the process checkpoint); with *like_026*, 0.26's (0.31's, without the engine's
    weight version and VLLMClientError)."""
    like_031 = like_031 or like_026
    version = ("0.34.0" if like_034 else "0.33.0" if pause_rejects_new else "0.26.0" if like_026
               else "0.31.0" if like_031 else "0.32.0")
    names = VllmNames(
        version=f"{version}+fake",
        engine_weight_version=not like_026,
        client_error=not like_026,
        native_spans=not like_031,
        utility_all=not like_031,
        paused_errors=(fake.RetryableRequestError,) if pause_rejects_new else (),
        TokensPrompt=fake.TokensPrompt,
        SamplingParams=fake.SamplingParams,
        final_only=fake.RequestOutputKind.FINAL_ONLY,
        client_errors=(ValueError, fake.FakeNotFoundError) if like_026 else (fake.FakeValidationError, ValueError),
        status_errors=(fake.GracefulHTTPError,),
        process_checkpoint=like_034,
    )
    check_names(names)
    return names


def create_app(args: Namespace, llm: Optional[fake.AsyncLLM] = None, dev_mode: bool = False, plugin: bool = True) -> FastAPI:
    """The fake vLLM server app: native routes, the plugin (unless *plugin* is false), the
    middleware; the engine starts with the app."""
    like_031, like_034 = getattr(args, "like_031", False), getattr(args, "like_034", False)
    like_026 = getattr(args, "like_026", False)
    rejects = getattr(args, "pause_rejects_new", False) or like_034
    llm = llm or _make_llm(args, step_s=args.step_s)
    endpoint_plugin = VllmEndpointPlugin(load_names=lambda: fake_names(rejects, like_031, like_034, like_026)) if plugin else None
    if plugin and getattr(args, "general_plugin", True):
        # What the general plugin does in the engine-core process (plugin.general_plugin).
        engine_core.install_request_counts(fake.EngineCore)
        engine_core.install_pause_hold(fake.EngineCore)
        engine_core.install_checkpoint_guard(fake.EngineCore)
        engine_core.install_weight_version(fake.EngineCore)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        llm.start()
        if endpoint_plugin is not None:
            await endpoint_plugin.init_state(llm, app.state, args)
            _front_ends[endpoint_plugin._api_server.index] = endpoint_plugin
        try:
            yield
        finally:
            await llm.shutdown()

    app = FastAPI(lifespan=lifespan)
    app.state.engine_client = llm
    _native_routes(app, llm, dev_mode, engine_version=not like_026)

    @app.get("/fake/engine_calls")
    async def engine_calls() -> dict:
        """How often the engine core got each utility call, from every front end (not a vLLM route)."""
        return dict(llm.engine_core.core.utility_calls)

    if like_034 and getattr(args, "enable_sleep_mode", False):
        _checkpoint_routes(app, llm)
    if endpoint_plugin is not None:
        _attach_endpoint_plugin(app, endpoint_plugin)
    keys = [k for k in (args.api_key or []) if k]
    if keys:
        app.add_middleware(_AuthenticationMiddleware, tokens=keys)
    delay_s = getattr(args, "aborted_answer_delay_s", 0.0)
    if delay_s:
        app.add_middleware(_SlowAbortedAnswers, delay_s=delay_s)
    return app


def _make_llm(args: Namespace, **kwargs: Any) -> fake.AsyncLLM:
    """The fake AsyncLLM of the release *args* name (``--like-0.26``, ``--like-0.31``, ``--like-0.34``)."""
    like_034 = getattr(args, "like_034", False)
    rejects = getattr(args, "pause_rejects_new", False) or like_034
    if getattr(args, "like_026", False):
        return fake.AsyncLLM026(pause_rejects_new=rejects, **kwargs)
    return fake.AsyncLLM(pause_rejects_new=rejects, stamp_versions=not getattr(args, "like_031", False),
                         checkpoints=like_034, **kwargs)


def _native_routes(app: FastAPI, llm: fake.AsyncLLM, dev_mode: bool, engine_version: bool = True) -> None:
    calls: list[tuple[str, Any]] = []

    @app.get("/health")
    async def health() -> dict:
        return {}

    @app.get("/version")
    async def version() -> dict:
        return {"version": "0.32.0"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "fake-vllm", "object": "model"}]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        """The scheduler gauges and the prefix-cache counters of v1/metrics/loggers.py (only these
        are faked); a counter ``vllm:X`` is exposed as ``vllm:X_total`` (loggers.py:661-679)."""
        scheduler = llm.engine_core.core.scheduler
        running, waiting = scheduler.get_request_counts()
        cache = scheduler.kv_cache_manager
        labels = 'engine="0",model_name="fake-vllm"'
        return PlainTextResponse(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{labels}}} {float(running)}\n"
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{labels}}} {float(waiting)}\n"
            "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n"
            "# TYPE vllm:prefix_cache_queries_total counter\n"
            f"vllm:prefix_cache_queries_total{{{labels}}} {float(cache.queries)}\n"
            "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"
            "# TYPE vllm:prefix_cache_hits_total counter\n"
            f"vllm:prefix_cache_hits_total{{{labels}}} {float(cache.hits)}\n"
        )

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        """A minimal /v1/completions: ``prompt`` (text or token ids), ``max_tokens``, ``cache_salt``;
        non-streaming."""
        body = await request.json()
        prompt = body.get("prompt", "")
        prompt = {"prompt_token_ids": prompt} if isinstance(prompt, list) else prompt
        if (salt := body.get("cache_salt")) is not None:
            # Checked as vLLM checks it (generate/base/protocol.py:39-58, completion/protocol.py:
            # 423-427), then part of the prompt the engine gets (renderers/online_renderer.py:500).
            message = None
            if not isinstance(salt, str) or not salt:
                message = "Parameter 'cache_salt' must be a non-empty string if provided."
            elif len(salt) > 128 or any(c in "@/\\\x00" for c in salt):
                message = "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL."
            if message is not None:
                error = {"message": message, "type": "BadRequestError", "param": "cache_salt", "code": 400}
                return JSONResponse({"error": error}, status_code=400)
            prompt = {**prompt, "cache_salt": salt} if isinstance(prompt, dict) else {"prompt": prompt, "cache_salt": salt}
        params = fake.SamplingParams(max_tokens=int(body.get("max_tokens", 16)), ignore_eos=bool(body.get("ignore_eos", False)))
        # completion/serving.py:141: cmpl-<X-Request-Id, else the body's request_id, else random>-<prompt index>.
        base = request.headers.get("X-Request-Id") or body.get("request_id") or uuid.uuid4().hex
        request_id = f"cmpl-{base}-0"
        if body.get("stream"):
            return StreamingResponse(_completion_stream(llm, prompt, params, request_id), media_type="text/event-stream")
        final = None
        try:
            async for final in llm.generate(prompt, params, request_id):
                pass
        except fake.RetryableRequestError as err:
            # vLLM 0.33 during an abort pause (serve/exception_handling/error_response.py:59-66).
            return JSONResponse({"error": {"message": str(err), "type": "ServiceUnavailableError", "param": None,
                                           "code": 503}}, status_code=503)
        choice = final.outputs[0]
        return JSONResponse(
            {"id": request_id, "choices": [{"index": 0, "text": choice.text, "finish_reason": choice.finish_reason}],
             "usage": {"completion_tokens": len(choice.token_ids)}}
        )

    if not dev_mode:
        return

    # vLLM's dev-mode RL routes with the contract's paths (entrypoints/rl/online/api_router.py).
    @app.get("/fake/calls")
    async def fake_calls() -> list:
        """What the control routes below received, in order (not a vLLM route)."""
        return calls

    @app.post("/pause")
    async def pause(mode: str = "abort", clear_cache: bool = True) -> JSONResponse:
        calls.append(("/pause", {"mode": mode, "clear_cache": clear_cache}))
        try:
            await llm.pause_generation(mode=mode, clear_cache=clear_cache)
        except ValueError as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        return JSONResponse({"status": "paused"})

    @app.post("/resume")
    async def resume() -> JSONResponse:
        calls.append(("/resume", None))
        await llm.resume_generation()
        return JSONResponse({"status": "resumed"})

    @app.post("/abort_requests")
    async def abort_requests(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            raise HTTPException(status_code=400, detail="Invalid JSON format") from None
        calls.append(("/abort_requests", body))
        ids = body.get("request_ids") or list(llm.output_processor.request_states)
        await llm.abort(ids, internal=not body.get("request_ids"))
        return JSONResponse({"status": "aborted", "aborted": len(ids)})  # ids requested, not aborted

    @app.get("/is_paused")
    async def is_paused() -> JSONResponse:
        return JSONResponse({"is_paused": await llm.is_paused()})

    if engine_version:
        _version_routes(app, llm, calls)

    # Dev mode's sleep routes (serve/dev/sleep/api_router.py:26-60) and the weight-transfer finish
    # (entrypoints/rl/online/api_router.py), as far as the fake has them.
    @app.post("/sleep")
    async def sleep(level: int = 1, mode: str = "abort") -> JSONResponse:
        await llm.sleep(level, mode)
        return JSONResponse({"status": "sleeping", "level": level})

    @app.post("/wake_up")
    async def wake_up(request: Request) -> JSONResponse:
        tags = request.query_params.getlist("tags") or None
        fully_awake = await llm.wake_up(tags)
        return JSONResponse({"status": "awake" if fully_awake else "sleeping", "tags": tags})

    @app.post("/finish_weight_update")
    async def finish_weight_update(request: Request) -> JSONResponse:
        body = await request.json() if await request.body() else {}
        if engine_version:
            await llm.finish_weight_update(body.get("weight_version"))
        else:  # 0.26: no weight_version (serve/dev/rlhf/api_router.py:205-208)
            await llm.finish_weight_update()
        return JSONResponse({"message": "Weight update finished"})


def _version_routes(app: FastAPI, llm: fake.AsyncLLM, calls: list) -> None:
    """vLLM's dev-mode weight-version routes (0.27 on; 0.26 has neither)."""

    @app.post("/update_weight_version")
    async def update_weight_version(request: Request) -> JSONResponse:
        body = await request.json()
        calls.append(("/update_weight_version", body))
        await llm.update_weight_version(body["new_version"])
        return JSONResponse({"success": True, "new_version": body["new_version"]})

    @app.get("/weight_info")
    async def weight_info() -> JSONResponse:
        return JSONResponse({"weight_version": await llm.get_weight_version()})


def _checkpoint_routes(app: FastAPI, llm: fake.AsyncLLM) -> None:
    """vLLM 0.34's process-checkpoint routes (serve/checkpoint/api_router.py:39-98), mounted with
    ``--enable-sleep-mode`` outside dev mode (launchers/api_server/routers.py:68-73), and the
    fake's switch for ``EngineFaultedError``."""

    def answer(state: Any, error: Optional[str], status: int) -> JSONResponse:
        return JSONResponse({"state": str(state), **({"error": error} if error else {})}, status_code=status)

    @app.post("/checkpoint/prepare")
    async def checkpoint_prepare(mode: str = "wait") -> JSONResponse:
        state, error = await llm.checkpoint_state()
        if state == fake.CheckpointState.RUNNING:
            if refusal := await llm.checkpoint_prepare(mode):
                return answer(state, refusal, 400)
            state, error = await llm.checkpoint_state()
        elif state in (fake.CheckpointState.RESTORING, fake.CheckpointState.FAILED):
            return answer(state, error, 400)
        return answer(state, error, 200)

    @app.post("/checkpoint/restore")
    async def checkpoint_restore() -> JSONResponse:
        state, error = await llm.checkpoint_state()
        if state in (fake.CheckpointState.PREPARING, fake.CheckpointState.FAILED):
            return answer(state, error, 400)
        if state == fake.CheckpointState.PREPARED:
            await llm.checkpoint_restore()
            state, error = await llm.checkpoint_state()
        return answer(state, error, 200)

    @app.get("/checkpoint/status")
    async def checkpoint_status() -> JSONResponse:
        state, error = await llm.checkpoint_state()
        status = 200 if state == fake.CheckpointState.PREPARED else 500 if state == fake.CheckpointState.FAILED else 503
        return answer(state, error, status)

    @app.post("/fake/engine_fault")
    async def engine_fault(request: Request) -> dict:
        """Mark the engine faulted (``{"faulted": true}``) or healthy again (not a vLLM route)."""
        llm.faulted = bool((await request.json())["faulted"])
        return {"faulted": llm.faulted}


async def _completion_stream(llm: fake.AsyncLLM, prompt: Any, params: fake.SamplingParams, request_id: str):
    """A streamed /v1/completions (completion/serving.py:279-500): one SSE event per output, the
    finish reason on the last, then ``[DONE]``."""
    async for out in llm.generate(prompt, params, request_id):
        choice = out.outputs[0]
        event = {"id": request_id, "choices": [{"index": 0, "text": choice.text, "finish_reason": choice.finish_reason}]}
        yield f"data: {json.dumps(event)}\n\n"
    yield "data: [DONE]\n\n"


class _SlowAbortedAnswers:
    """Holds the last body chunk of an aborted request's answer for *delay_s*: the answer of a
    request vLLM has already released reaches the client later, as behind any middleware that
    passes answers through another task (``@app.middleware("http")``, such as vLLM's own
    ``log_response`` with ``VLLM_DEBUG_LOG_API_SERVER_RESPONSE``, serve/middleware/register.py:57-63),
    or a batch request, whose generators vLLM runs in tasks of their own (utils/async_utils.py:113-125)."""

    def __init__(self, app: Any, delay_s: float) -> None:
        self.app = app
        self.delay_s = delay_s

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        answer = {"aborted": False}
        token = fake.ABORTED_ANSWER.set(answer)

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False) and answer["aborted"]:
                await asyncio.sleep(self.delay_s)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            fake.ABORTED_ANSWER.reset(token)


def _attach_endpoint_plugin(app: FastAPI, plugin: VllmEndpointPlugin) -> None:
    """plugins/endpoint_plugins/interface.py:108-146: a plugin route replaces an earlier route
    with the same path and method, in its place."""
    existing = {id(route) for route in app.routes}
    plugin.attach_router(app)
    routes = []
    for route in app.routes:
        if id(route) in existing or not isinstance(route, APIRoute):
            routes.append(route)
            continue
        insert_at = len(routes)
        retained = []
        for previous in routes:
            if isinstance(previous, APIRoute) and previous.path == route.path and previous.methods & route.methods:
                logger.info("Endpoint plugin overrides %s %s", ", ".join(sorted(previous.methods & route.methods)), route.path)
                insert_at = min(insert_at, len(retained))
                methods = previous.methods - route.methods
                if not methods:
                    continue
                previous = copy(previous)
                previous.methods = methods
            retained.append(previous)
        retained.insert(insert_at, route)
        routes = retained
    app.router.routes[:] = routes
    app.openapi_schema = None
    app.state.endpoint_plugins = [plugin]


class _AuthenticationMiddleware:
    """serve/middleware/authenticate.py: only paths under GUARDED_PREFIX need the key."""

    def __init__(self, app, tokens: list[str]) -> None:
        self.app = app
        self.api_tokens = [hashlib.sha256(t.encode()).digest() for t in tokens]

    def _verify(self, request_headers) -> bool:
        scheme, _, param = (request_headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(param.encode()).digest()
        return any(secrets.compare_digest(digest, t) for t in self.api_tokens)

    async def __call__(self, scope, receive, send) -> None:
        from starlette.datastructures import Headers

        if scope["type"] in ("http", "websocket") and scope.get("method") != "OPTIONS":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if path.startswith(GUARDED_PREFIX) and not self._verify(Headers(scope=scope)):
                await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def main(argv: Optional[list[str]] = None) -> None:
    """Run the fake vLLM server on loopback with uvicorn."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", action="append", default=None, help="vLLM's --api-key (repeatable)")
    parser.add_argument("--api-server-count", type=int, default=None,
                        help="front ends (API server processes) sharing the engine core and the port")
    parser.add_argument("--step-s", type=float, default=0.003, help="seconds per decode step of the fake engine core")
    parser.add_argument("--dev-mode", action="store_true", help="mount vLLM's dev-mode RL routes (VLLM_SERVER_DEV_MODE=1)")
    parser.add_argument("--pause-rejects-new", action="store_true",
                        help="vLLM 0.33's pause: abort mode rejects new requests (503 engine_paused) until resume")
    parser.add_argument("--like-0.31", dest="like_031", action="store_true",
                        help="vLLM 0.30/0.31: no weight-version spans from the engine, no call_utility_all_async")
    parser.add_argument("--like-0.26", dest="like_026", action="store_true",
                        help="vLLM 0.26: 0.31's, without the engine's weight version and VLLMClientError")
    parser.add_argument("--like-0.34", dest="like_034", action="store_true",
                        help="vLLM 0.34: 0.33's pause, the process checkpoint, EngineFaultedError")
    parser.add_argument("--enable-sleep-mode", action="store_true",
                        help="with --like-0.34: mount /checkpoint/prepare|restore|status (and /fake/engine_fault)")
    parser.add_argument("--aborted-answer-delay-s", type=float, default=0.05,
                        help="seconds an aborted request's answer is held before its last chunk is written")
    parser.add_argument("--no-plugin", dest="plugin", action="store_false", help="vLLM without engine-plugins")
    parser.add_argument("--without-general-plugin", dest="general_plugin", action="store_false",
                        help="the endpoint plugin only: VLLM_PLUGINS kept the general plugin out of the engine core")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    count = args.api_server_count or 1
    if count == 1:
        uvicorn.run(create_app(args, dev_mode=args.dev_mode, plugin=args.plugin), host=args.host, port=args.port, log_level="warning")
        return
    asyncio.run(_serve_front_ends(args, count))


async def _serve_front_ends(args: Namespace, count: int) -> None:
    """*count* front ends on one engine core, each with its own app and plugin instance, all on
    one port (SO_REUSEPORT, as vLLM's API processes: the kernel spreads the connections).

    vLLM runs each front end in a process of its own; here they share one, which the plugin
    cannot tell apart: they still reach each other only through their peer sockets."""
    first = _make_llm(args, step_s=args.step_s)
    llms = [first] + [_make_llm(args, core=first.engine_core.core, client_index=i) for i in range(1, count)]
    # vLLM's parent process hands its API processes their link (plugin.general_plugin); here
    # the front ends' parent, as they see it, is the process that started this one.
    peers.hand_out(os.getppid())
    servers = []
    for llm in llms:
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say they are TCP.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((args.host, args.port))
        app = create_app(args, llm=llm, dev_mode=args.dev_mode, plugin=args.plugin)
        _peer_faults(app)
        servers.append((_QuietServer(uvicorn.Config(app, log_level="warning")), sock))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: [setattr(server, "should_exit", True) for server, _ in servers])
    await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in servers))


# The front ends' plugins by index, and the faults injected into their peer calls.
_front_ends: dict[int, VllmEndpointPlugin] = {}
_faults: dict[int, dict] = {}
_cleared: dict[int, asyncio.Event] = {}


def _peer_faults(app: FastAPI) -> None:
    """``POST /fake/peer_fault {"api_server": I, "op": OP or null, "fault": F}`` on any front end:
    front end I fails the peer calls *OP* (null: every op) it gets from now on. ``"raise"``:
    the op raises; ``"stop"``: the call waits, unread, as at a process stopped by SIGSTOP,
    until the fault is cleared (``"fault": null``), when the front end reads it as that
    process would on SIGCONT. Not a vLLM route."""

    @app.post("/fake/peer_fault")
    async def peer_fault(request: Request) -> dict:
        body = await request.json()
        index = body["api_server"]
        cleared = _cleared.setdefault(index, asyncio.Event())
        if body.get("fault") is None:
            _faults.pop(index, None)
            cleared.set()
            return {"faults": _faults}
        _faults[index] = {"op": body.get("op"), "fault": body["fault"]}
        cleared.clear()
        control = _front_ends[index]._control
        link = control.peers
        if not getattr(link, "_faulty", False):
            link._faulty = True
            run = link._run

            async def stoppable(line: bytes) -> dict:
                while _matches(index, json.loads(line).get("op"), "stop"):
                    await _cleared[index].wait()
                return await run(line)

            link._run = stoppable
            for name, op in list(link._ops.items()):
                async def raising(*args, _name=name, _op=op, **kwargs):
                    if _matches(index, _name, "raise"):
                        raise RuntimeError(f"injected fault in {_name!r}")
                    return await _op(*args, **kwargs)

                link._ops[name] = raising
        return {"faults": _faults}


def _matches(index: int, op: str, fault: str) -> bool:
    found = _faults.get(index)
    return found is not None and found["fault"] == fault and found["op"] in (None, op)


class _QuietServer(uvicorn.Server):
    """uvicorn's Server without its own signal handlers (several share one process)."""

    @contextmanager
    def capture_signals(self):
        yield
