"""Mount the contract's routes on vLLM's API server, in place of vLLM's routes with the same path
and method (its dev-mode RL routes share five of them).

From vLLM 0.32 on, vLLM itself moves an endpoint plugin's routes in front of the earlier routes
they replace, after ``attach_router``; before 0.32 it only appends them, so vLLM's own dev-mode
routes would win. So the plugin takes the replaced methods off vLLM's routes itself, on every
version (vLLM 0.32's own pass then finds nothing to replace), drops the routes whose vLLM
counterparts are to be kept, and reports what happened.
"""

from __future__ import annotations

from copy import copy
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute


@dataclass
class MountReport:
    """What mounting did: ``(METHOD, path)`` pairs added, replacing vLLM's, and kept as vLLM's."""

    added: list[tuple[str, str]] = field(default_factory=list)
    replaced: list[tuple[str, str]] = field(default_factory=list)
    kept_native: list[tuple[str, str]] = field(default_factory=list)


def mount(app: Any, router: APIRouter, replace_native: bool = True) -> MountReport:
    """Include *router* in vLLM's *app*; where vLLM serves the same method and path, the contract's
    route replaces it (vLLM does the replacing), or with *replace_native* false is left out."""
    report = MountReport()
    native = {(m, getattr(r, "path", "")) for r in app.routes for m in (getattr(r, "methods", None) or ())}
    kept = []
    for route in router.routes:
        for method in sorted(getattr(route, "methods", None) or ()):
            if (method, route.path) not in native:
                report.added.append((method, route.path))
            elif replace_native:
                report.replaced.append((method, route.path))
            else:
                report.kept_native.append((method, route.path))
                kept.append(route)
    router.routes = [r for r in router.routes if r not in kept]
    _remove_native(app, set(report.replaced))
    app.include_router(router)
    return report


def _remove_native(app: Any, replaced: set[tuple[str, str]]) -> None:
    """Take the *replaced* ``(METHOD, path)`` pairs off vLLM's own routes, keeping their other
    methods (vLLM 0.32's rule, plugins/endpoint_plugins/interface.py:97-146)."""
    if not replaced:
        return
    routes = []
    for route in app.router.routes:
        if isinstance(route, APIRoute):
            gone = {m for m in route.methods if (m, route.path) in replaced}
            if gone:
                if gone == set(route.methods):
                    continue
                route = copy(route)
                route.methods = set(route.methods) - gone
        routes.append(route)
    app.router.routes[:] = routes
