"""Mount the contract's routes on SGLang's FastAPI app, in place of SGLang's routes with the
same path and method.

Starlette serves the first route that matches, and SGLang registers its routes at import, so
the contract's routes go first and the native ones they replace are removed. Some native
routes sit inside included routers (SGLang's ``/v1/loads``); with FastAPI 0.165 those are lazy
``_IncludedRouter`` entries that cache their routes by version, so each router touched is
walked and marked changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from fastapi import APIRouter


@dataclass
class MountReport:
    """What mounting did: ``(METHOD, path)`` pairs added; ``(METHOD, path, SGLang endpoint)``
    triples replaced, or kept because replacing is switched off."""

    added: list[tuple[str, str]] = field(default_factory=list)
    replaced: list[tuple[str, str, str]] = field(default_factory=list)
    kept_native: list[tuple[str, str, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        """Human-readable lines for the startup log."""
        out = [
            f"engine_plugins: added routes: {_listing(self.added)}",
            f"engine_plugins: replaced SGLang routes: {_listing(self.replaced)}",
        ]
        if self.kept_native:
            out.append(
                f"engine_plugins: kept SGLang routes (ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES=false), "
                f"contract route not mounted: {_listing(self.kept_native)}"
            )
        return out


def _listing(routes: list[tuple]) -> str:
    """``GET /a, POST /b (module.endpoint)``, or ``none``."""
    return ", ".join(f"{r[0]} {r[1]}" + (f" ({r[2]})" if len(r) > 2 else "") for r in routes) or "none"


def _endpoint_name(route: Any) -> str:
    endpoint = getattr(route, "endpoint", None)
    if endpoint is None:
        return getattr(route, "name", "") or ""
    return f"{getattr(endpoint, '__module__', '?')}.{getattr(endpoint, '__qualname__', getattr(endpoint, '__name__', '?'))}"


def _walk(router: Any, prefix: str = "") -> Iterator[tuple[Any, Any, str]]:
    """``(owning router, route, full path)`` for every route, through included routers."""
    for route in list(router.routes):
        original = getattr(route, "original_router", None)
        if original is not None:  # FastAPI >= 0.16x: a lazy included router
            context = getattr(route, "include_context", None)
            yield from _walk(original, prefix + (getattr(context, "prefix", "") or ""))
            continue
        path = getattr(route, "path", None)
        if path is not None:
            yield router, route, prefix + path


def _mark_changed(router: Any) -> None:
    mark = getattr(router, "_mark_routes_changed", None)
    if callable(mark):
        mark()


def native_routes(app: Any, method: str, path: str) -> list[tuple[Any, Any]]:
    """The app's routes (with their owning router) that serve exactly ``method path``."""
    return [(owner, route) for owner, route, full in _walk(app.router) if full == path and method in (getattr(route, "methods", None) or ())]


def mount(
    app: Any, router: APIRouter, replace_native: bool = True, mark_endpoint: Callable[[Any], None] = lambda endpoint: None
) -> MountReport:
    """Put *router*'s routes first on *app*; replace (or keep, and skip ours) same-path natives.

    *mark_endpoint* is called on each endpoint mounted (SGLang's key middleware reads a mark on
    the endpoint). Mounting twice is harmless: when the contract's routes are there already,
    nothing changes.
    """
    report = MountReport()
    if any(getattr(getattr(r, "endpoint", None), "_engine_plugins_route", False) for r in app.router.routes):
        return report
    to_insert = []
    for route in router.routes:
        if getattr(route, "path", None) is None:
            continue
        served = []
        for method in sorted(route.methods or ()):
            natives = native_routes(app, method, route.path)
            if natives and not replace_native:
                report.kept_native.extend((method, route.path, _endpoint_name(n)) for _, n in natives)
                continue
            for owner, native in natives:
                if set(native.methods or ()) <= set(route.methods or ()):
                    owner.routes.remove(native)
                    _mark_changed(owner)
                # A native route serving other methods too stays for those; ours, first, wins for this one.
                report.replaced.append((method, route.path, _endpoint_name(native)))
            report.added.append((method, route.path))
            served.append(method)
        if served:
            route.endpoint._engine_plugins_route = True
            mark_endpoint(route.endpoint)
            to_insert.append(route)
    app.router.routes[:0] = to_insert
    _mark_changed(app.router)
    app.openapi_schema = None
    return report
