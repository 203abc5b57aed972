"""SGLang held in-process, as ROLL holds it: ``sglang.Engine`` built in this process (no SGLang
HTTP server), its contract served by ``engine_plugins.inprocess.attach(engine).app()`` with uvicorn
on the engine's own event loop.

    python -m frameworks.inprocess_sglang_server [the flags of python -m sglang.launch_server]

ROLL (alibaba/ROLL, ``roll/third_party/sglang/async_engine.py`` and its SGLang strategy) builds
``sglang.Engine`` in a Ray worker and drives its TokenizerManager as Python calls
(``generate_request``, ``abort_request``); here the tests reach the same engine over HTTP. Besides
the contract's routes (and SGLang's own control routes, as the plugin serves them on a server), the
app has what the test suite needs of SGLang's server: ``GET /health`` and ``POST /generate``,
each a direct call of the engine's TokenizerManager (``/generate`` answers as SGLang's own:
one JSON answer, or server-sent events with ``stream``). ``--host``, ``--port`` and ``--api-key``
are the uvicorn server's and its key; SGLang itself opens no port.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations (``Request``,
# imported where the app is built) at runtime.
import hmac
import json
import sys
from typing import Any, AsyncIterator


def build_app(engine: Any) -> Any:
    """The contract's app over *engine*, with SGLang's control routes and ``/health``, ``/generate``."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from sglang.srt.managers.io_struct import GenerateReqInput

    from engine_plugins.engines.sglang import native_routes
    from engine_plugins.engines.sglang.plugin import installed
    from engine_plugins.host.http_api import build_routes
    from engine_plugins.inprocess import attach

    control = attach(engine)
    app = control.app()
    names, stack = installed().names, control.stack
    app.include_router(build_routes(stack.hooks, stack.settings, [*native_routes.REPLACED_ROUTES, *native_routes.ALIAS_ROUTES],
                                    names.api_keys))
    tm = engine.tokenizer_manager
    keys = [k for k in names.api_keys() if k]

    def refused(request: Request) -> Any:
        # SGLang's key middleware guards its /generate with --api-key.
        given = request.headers.get("authorization", "").removeprefix("Bearer ")
        if keys and not any(hmac.compare_digest(given, k) for k in keys):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return None

    @app.get("/health")
    async def health() -> Any:
        return {}

    @app.post("/generate")
    async def generate(request: Request) -> Any:
        no = refused(request)
        if no is not None:
            return no
        obj = GenerateReqInput(**await request.json())
        outputs = tm.generate_request(obj, request)
        if obj.stream:
            return StreamingResponse(_events(outputs), media_type="text/event-stream")
        try:
            return await outputs.__anext__()
        except ValueError as exc:  # SGLang's /generate answers its checks' errors as a 400
            return JSONResponse({"error": {"message": str(exc)}}, status_code=400)

    return app


async def _events(outputs: AsyncIterator[dict]) -> AsyncIterator[bytes]:
    """SGLang's stream format: ``data: <json>`` per output, then ``data: [DONE]``."""
    try:
        async for out in outputs:
            yield b"data: " + json.dumps(out).encode() + b"\n\n"
    except ValueError as exc:
        yield b"data: " + json.dumps({"error": {"message": str(exc)}}).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def main() -> None:
    """Build the engine in this process, serve its contract on its own event loop until stopped."""
    import uvicorn
    import sglang
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(sys.argv[1:])
    engine = sglang.Engine(server_args=server_args)
    try:
        config = uvicorn.Config(build_app(engine), host=server_args.host, port=server_args.port, log_level="warning",
                                timeout_keep_alive=5)
        engine.loop.run_until_complete(uvicorn.Server(config).serve())
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
