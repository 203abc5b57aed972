"""Serve the stub engine with the contract over real HTTP: ``python -m engine_plugins.engines.stub``."""

from __future__ import annotations

import argparse
from typing import Optional

from fastapi import FastAPI, Response

from engine_plugins.host.assembly import assemble
from engine_plugins.host.config import Settings, load_settings
from engine_plugins.core.control import RolloutControl
from engine_plugins.engines.stub.engine import StubEngine


def create_app(engine: Optional[StubEngine] = None, settings: Optional[Settings] = None) -> FastAPI:
    """A FastAPI app serving the contract on *engine* (a default :class:`StubEngine`).

    The engine is built lazily on the server's event loop, as the real engines build theirs.
    The plugin stack is ``app.state.plugin_stack``; ``/metrics`` serves prometheus_client's
    default registry when prometheus_client is installed.
    """
    app = FastAPI(title="engine-plugins stub engine")
    state: dict[str, RolloutControl] = {}

    def get_control() -> Optional[RolloutControl]:
        if "control" not in state:
            seam = engine or StubEngine(scope_prefix_cache=stack.settings.scope_prefix_cache)
            state["control"] = RolloutControl(seam, stack.settings.abort_timeout_s)
        return state["control"]

    stack = assemble(get_control, lambda: get_control().seam.api_keys(), settings)
    app.state.plugin_stack = stack
    app.include_router(stack.router)
    about = stack.about
    about.app = f"{__name__}.create_app()"
    about.role = "the stub engine's server process"
    about.routes = [f"{m} {r.path}" for r in stack.router.routes for m in sorted(getattr(r, "methods", None) or ())]
    about.ready = True
    _mount_metrics(app)

    @app.get("/health")
    async def health() -> dict:
        """Liveness, as the engines have it."""
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        """The OpenAI model list both engines serve; gateways (smg) probe it to register a worker."""
        return {"object": "list", "data": [{"id": STUB_MODEL, "object": "model", "owned_by": "engine-plugins-stub"}]}

    return app


STUB_MODEL = "engine-plugins-stub"
"""The model name the stub engine lists on ``/v1/models``."""


def _mount_metrics(app: FastAPI) -> None:
    """Serve prometheus_client's default registry on ``/metrics``, as both engines do."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
    except ImportError:
        return  # prometheus_client is optional; the engines bring their own

    @app.get("/metrics")
    async def metrics() -> Response:
        """The default registry in Prometheus' text format."""
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


def main(argv: Optional[list[str]] = None) -> None:
    """Run the stub engine on loopback with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--step-s", type=float, default=0.002, help="seconds per decode step")
    parser.add_argument("--tokenize-s", type=float, default=0.0, help="seconds a request spends tokenizing")
    parser.add_argument("--release-delay-s", type=float, default=0.0, help="seconds an aborted request takes to release")
    parser.add_argument("--api-key", default=None, help="the engine's own API key")
    parser.add_argument("--context-length", type=int, default=1_000_000, help="the model's context length in tokens")
    args = parser.parse_args(argv)
    settings = load_settings()
    engine = StubEngine(step_s=args.step_s, tokenize_s=args.tokenize_s, release_delay_s=args.release_delay_s,
                        api_key=args.api_key, context_length=args.context_length,
                        scope_prefix_cache=settings.scope_prefix_cache)
    uvicorn.run(create_app(engine, settings), host=args.host, port=args.port, log_level="warning")
