"""The tests' handle on an engine a framework holds in-process, which no HTTP route reaches.

verl, OpenRLHF, NeMo-RL and ROLL hold the engine as a Python object in a Ray actor, and TRL in its
trainer's own process: their control calls are Python calls (``await self.llm.pause_generation(...)``),
made by the framework's own actor methods, which its trainer reaches through Ray. The launch
modules beside this one (``*_inproc.py``) are each such a framework's driver: they start Ray, create
the framework's actor (its methods transcribed) and then serve this relay on the target's port, so
that a test, in another interpreter, plays the trainer: ``POST /call/METHOD`` with
``{"args": [...], "kwargs": {...}}`` runs ``await actor.METHOD.remote(*args, **kwargs)`` (or the
host object's method, for TRL) and answers ``{"result": ...}`` made JSON by the module's
``to_json``. Nothing of the relay is the framework's: it stands for the trainer's Ray calls.

``GET /health`` answers 200 once the engine is up (the launcher's readiness check). The relay takes
the server's ``--api-key`` as a bearer token, as the other test servers do.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations (Request), imported
# where the app is built.
import asyncio
import dataclasses
import socket
import traceback
from typing import Any, Awaitable, Callable, Optional

# Calls a method of the engine's host by name: returns its (awaited) result.
Caller = Callable[[str, list, dict], Awaitable[Any]]


def plain(value: Any) -> Any:
    """*value* as JSON: dicts, lists, dataclasses and pydantic models field by field, vLLM's
    ``RequestOutput`` as its tokens, finish reason and cached-token count; anything else by repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if type(value).__name__ == "RequestOutput" and hasattr(value, "outputs"):
        first = value.outputs[0] if value.outputs else None
        return {
            "request_id": value.request_id,
            "token_ids": list(first.token_ids) if first is not None else [],
            "finish_reason": first.finish_reason if first is not None else None,
            "num_cached_tokens": getattr(value, "num_cached_tokens", None),
            "finished": value.finished,
        }
    if hasattr(value, "model_dump"):
        return plain(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if hasattr(value, "tolist"):
        return value.tolist()
    return repr(value)


def reserve_port(host: str, port: int) -> socket.socket:
    """The target's port, bound and listening now: a launch module reserves it before it starts
    Ray, whose processes take free ports of their own and could take this one before the relay
    binds it (the connections wait in the backlog until the relay serves)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def serve_relay(host: str, port: int, api_key: Optional[str], call: Caller,
                to_json: Callable[[Any], Any] = plain, sock: Optional[socket.socket] = None) -> None:
    """Serve the relay on *host*:*port* (on *sock*, that port reserved by :func:`reserve_port`)
    until the process is stopped."""
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()

    def allowed(request: Request) -> bool:
        return not api_key or request.headers.get("authorization") == f"Bearer {api_key}"

    @app.get("/health")
    async def health(request: Request):
        return JSONResponse({"status": "ok"}, status_code=200 if allowed(request) else 401)

    @app.post("/call/{method}")
    async def relay(method: str, request: Request):
        if not allowed(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        body = await request.json() if (await request.body()) else {}
        try:
            result = await call(method, list(body.get("args", [])), dict(body.get("kwargs", {})))
        except Exception as exc:  # noqa: BLE001 - the test reads what the framework's call raised
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()},
                                status_code=500)
        return JSONResponse({"result": to_json(result)})

    if sock is None:
        uvicorn.run(app, host=host, port=port, log_level="warning")
        return
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    asyncio.run(server.serve(sockets=[sock]))


def ray_caller(actor: Any) -> Caller:
    """A caller for a Ray actor handle: ``await actor.METHOD.remote(*args, **kwargs)``."""

    async def call(method: str, args: list, kwargs: dict) -> Any:
        return await getattr(actor, method).remote(*args, **kwargs)

    return call


def thread_caller(host: Any) -> Caller:
    """A caller for a synchronous object (TRL's ``vllm.LLM``): each call in one worker thread, in
    order, as the trainer's single thread makes them."""
    from concurrent.futures import ThreadPoolExecutor

    executor = ThreadPoolExecutor(max_workers=1)

    async def call(method: str, args: list, kwargs: dict) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, lambda: getattr(host, method)(*args, **kwargs))

    return call


class Relay:
    """The test's side: ``await relay.call("pause_generation")`` runs the framework's method on its
    engine's host and returns its result as JSON; a call that raised there raises
    :class:`RelayError` here with the framework's exception and traceback."""

    def __init__(self, url: str, api_key: str) -> None:
        import httpx

        self.http = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {api_key}"},
                                      timeout=httpx.Timeout(300.0, connect=30.0),
                                      limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        response = await self.http.post(f"/call/{method}", json={"args": list(args), "kwargs": kwargs})
        body = response.json()
        if response.status_code != 200:
            raise RelayError(f"{method}: {body.get('error')}\n{body.get('traceback', '')}")
        return body["result"]

    def start(self, method: str, *args: Any, **kwargs: Any) -> "asyncio.Task":
        """The call in the background (a request in flight while the test makes control calls)."""
        return asyncio.create_task(self.call(method, *args, **kwargs))

    async def __aenter__(self) -> "Relay":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.http.aclose()


class RelayError(AssertionError):
    """A framework's call raised on its engine's host."""
