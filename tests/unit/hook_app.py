"""The stub engine in-process with plugins of a test's own, reached through its real HTTP routes.

Requests go through httpx's ASGI transport to the app ``python -m engine_plugins.engines.stub`` serves,
so a hook is called exactly as on a server: parsed body, auth, dispatch, answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Optional

import httpx
from fastapi import FastAPI

from engine_plugins import hookimpl
from engine_plugins.host.config import Settings
from engine_plugins.core.control import RolloutControl
from engine_plugins.engines.stub.engine import StubEngine
from engine_plugins.engines.stub.server import create_app

# The call each hook's route gets by default: (method, path, JSON body).
CALLS: dict[str, tuple[str, str, Optional[dict]]] = {
    "abort": ("POST", "/abort_requests", {}),
    "loads": ("GET", "/v1/loads", None),
    "update_weight_version": ("POST", "/update_weight_version", {"new_version": "v2"}),
    "partial_generate": ("POST", "/partial_generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}}),
    "pause": ("POST", "/pause", {"mode": "keep"}),
    "resume": ("POST", "/resume", None),
    "is_paused": ("GET", "/is_paused", None),
}


@dataclass
class Stub:
    """A stub engine app with an HTTP client on it."""

    app: FastAPI
    http: httpx.AsyncClient

    @property
    def control(self) -> RolloutControl:
        return self.app.state.plugin_stack.hooks.control()

    async def call(self, hook: str, body: Any = ..., **kwargs: Any) -> httpx.Response:
        """Call *hook*'s route, with its default body unless *body* is given."""
        method, path, default = CALLS[hook]
        body = default if body is ... else body
        return await self.http.request(method, path, json=body, **kwargs)

    async def ok(self, hook: str, body: Any = ..., **kwargs: Any) -> dict:
        """Call *hook*'s route and return its JSON, failing on any status but 200."""
        response = await self.call(hook, body, **kwargs)
        assert response.status_code == 200, response.text
        return response.json()

    def generate(self, max_new_tokens: int, request_id: str = "r") -> "asyncio.Task[httpx.Response]":
        """Start a partial generation in the background."""
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": max_new_tokens}, "request_id": request_id}
        return asyncio.create_task(self.http.post("/partial_generate", json=body))

    async def wait_in_flight(self, n: int, deadline_s: float = 30.0) -> None:
        """Wait until the engine holds *n* requests, all of them running."""
        end = time.monotonic() + deadline_s
        registry = self.control.registry
        while len(registry) < n or registry.held():
            assert time.monotonic() < end, f"{n} requests never ran"
            await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def stub_app(plugins: Optional[dict[str, Any]] = None, settings: Optional[Settings] = None) -> AsyncIterator[Stub]:
    """A stub app with *plugins* registered by name, in order (so the last is asked first).

    No entry-point plugin is loaded unless *settings* says so (the metrics plugin stays out).
    """
    app = create_app(StubEngine(step_s=0.001), settings or Settings(plugins=frozenset()))
    for name, plugin in (plugins or {}).items():
        app.state.plugin_stack.pm.register(plugin, name=name)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://stub", timeout=60) as http:
        yield Stub(app, http)


def plugin_with(hook: str, fn: Callable[..., Any]) -> Any:
    """A plugin object whose only hookimpl is *fn*, for hook *hook*."""
    return type(f"{hook}_plugin", (), {hook: staticmethod(hookimpl(fn))})()


def deferring(hook: str, is_async: bool, seen: list) -> Any:
    """A plugin that records the control it was given, then defers (returns None)."""

    def defer(control):
        seen.append(control)

    async def defer_async(control):
        await asyncio.sleep(0)
        seen.append(control)

    return plugin_with(hook, defer_async if is_async else defer)


def raising(hook: str, error: Exception) -> Any:
    """A plugin whose hook raises *error*."""

    async def fail():
        raise error

    return plugin_with(hook, fail)


def spy() -> tuple[Any, list[str]]:
    """A plugin with every hook, deferring and recording the hook names it was called for."""
    calls: list[str] = []

    def recorder(hook: str) -> Any:
        def record():
            calls.append(hook)

        return staticmethod(hookimpl(record))

    cls = type("spy", (), {hook: recorder(hook) for hook in CALLS})
    return cls(), calls


async def assert_plugin_failure(stub: Stub, hook: str, caplog: Any) -> None:
    """The route of *hook* answers 500 naming the plugin ``broken`` but not its exception, which
    is logged with its traceback."""
    with caplog.at_level("ERROR", logger="engine_plugins.host.http_api"):
        response = await stub.call(hook)
    assert response.status_code == 500
    message = response.json()["error"]["message"]
    assert message == f"plugin 'broken' failed in hook '{hook}': internal error; the server log has the details"
    (record,) = [r for r in caplog.records if r.name == "engine_plugins.host.http_api"]
    assert "plugin 'broken'" in record.getMessage() and "RuntimeError: boom" in record.getMessage()
    assert record.exc_info[0] is RuntimeError
