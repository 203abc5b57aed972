"""vLLM's weight and memory routes, guarded by the server's API key when it has one.

vLLM's ``--api-key`` middleware guards only the paths under ``/v1``, ``/v2``, ``/inference`` and
``/cohere``, so the routes that change the weights or the memory under the requests in flight
(the weight-transfer engine's, ``/weight_checker``, whose reset zeroes the weights, dev mode's
``/collective_rpc``, ``/sleep``, ``/wake_up``, ``/reset_prefix_cache``) answer anyone who can
reach the port. With the plugin they need the same ``Authorization: Bearer <key>`` as the rest
of the server; a server without a key is unchanged.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from engine_plugins.contract.errors import ContractError
from engine_plugins.host.http_api import check_api_key
from engine_plugins.contract.schema import error_body
from engine_plugins.engines.vllm.native_routes import error_type

GUARDED_PATHS = frozenset({
    "/init_weight_transfer_engine",
    "/shutdown_weight_transfer_engine",
    "/start_weight_update",
    "/start_draft_weight_update",
    "/update_weights",
    "/finish_weight_update",
    "/weight_checker",
    "/collective_rpc",
    "/sleep",
    "/wake_up",
    "/reset_prefix_cache",
    "/release_kv_cache_memory",
    # 0.34: mounted with --enable-sleep-mode, outside dev mode; a prepare drains the server.
    "/checkpoint/prepare",
    "/checkpoint/restore",
    "/checkpoint/status",
})
"""vLLM's routes (every method) that change the weights or the memory the requests use."""


class GuardWeightRoutes:
    """ASGI middleware answering 401 on :data:`GUARDED_PATHS` without one of the server's keys."""

    def __init__(self, app: Any, keys: Callable[[], Iterable[str]]) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") in GUARDED_PATHS:
            try:
                check_api_key(_HeaderView(scope), self.keys())
            except ContractError as exc:
                body = json.dumps(error_body(exc.message, error_type(exc.status), exc.param, exc.status)).encode()
                await send({"type": "http.response.start", "status": exc.status,
                            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class _HeaderView:
    """The request's headers as :func:`~engine_plugins.host.http_api.check_api_key` reads them."""

    def __init__(self, scope: dict) -> None:
        self.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
