"""SGLang's API-key middleware (``utils/auth.py:74-220``), added by ``launch_server`` when a key is
set (``entrypoints/http_server.py:2886-2898``): it runs before any route, the plugin's included.

Rules, per the endpoint's ``_auth_level``: health, readiness and metrics are always open; an
``admin_optional`` endpoint needs the admin key if there is one, else the API key, else nothing;
any other endpoint needs the API key if there is one. A refusal is a 401 ``{"error": "Unauthorized"}``.
"""

from __future__ import annotations

import secrets
from typing import Any, Optional

from fastapi.responses import JSONResponse
from starlette.routing import Match

ADMIN_OPTIONAL = "admin_optional"


def _bearer_is(header: Optional[str], key: str) -> bool:
    scheme, _, token = (header or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token, key)


def _auth_level(app: Any, scope: dict) -> Optional[str]:
    for route in app.router.routes:
        match, child = route.matches(scope)
        if match == Match.FULL:
            return getattr(child.get("endpoint") or getattr(route, "endpoint", None), "_auth_level", None)
    return None


def allowed(app: Any, scope: dict, header: Optional[str], api_key: Optional[str], admin_api_key: Optional[str]) -> bool:
    """``decide_request_auth`` (74-152) for the request in *scope*."""
    path = scope["path"]
    if scope["method"] == "OPTIONS" or path.startswith(("/health", "/ready", "/metrics")):
        return True
    if _auth_level(app, scope) == ADMIN_OPTIONAL:
        if admin_api_key:
            return _bearer_is(header, admin_api_key)
        return _bearer_is(header, api_key) if api_key else True
    return _bearer_is(header, api_key) if api_key else True


def add_api_key_middleware(app: Any, api_key: Optional[str], admin_api_key: Optional[str]) -> None:
    """Guard *app* as SGLang's middleware does."""

    class ApiKeyMiddleware:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1") or None
                if not allowed(app, scope, header, api_key, admin_api_key):
                    await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                    return
            await self.inner(scope, receive, send)

    app.add_middleware(ApiKeyMiddleware)
