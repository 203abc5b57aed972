"""How hooks are called: pluggy's order, one at a time, awaited; 501, 503; ENGINE_PLUGINS_TRACE."""

import logging

import pytest
from hook_app import plugin_with, stub_app

from engine_plugins import hookimpl
from engine_plugins.host.config import Settings

pytestmark = pytest.mark.anyio


async def test_implementations_are_asked_in_pluggys_order_until_one_answers():
    asked = []

    def asking(name, answer=None, **marks):
        def is_paused():
            asked.append(name)
            return answer

        return type(name, (), {"is_paused": staticmethod(hookimpl(**marks)(is_paused))})()

    plugins = {
        "last": asking("last", trylast=True),
        "first": asking("first", tryfirst=True),
        "older": asking("older", answer={"is_paused": True, "mode": "keep"}),
        "newer": asking("newer"),
    }
    async with stub_app(plugins) as stub:
        assert await stub.ok("is_paused") == {"is_paused": True, "mode": "keep"}
    assert asked == ["first", "newer", "older"]
    order = [impl.plugin_name for impl in reversed(stub.app.state.plugin_stack.pm.hook.is_paused.get_hookimpls())]
    assert order == ["first", "newer", "older", "engine", "last"], "a plugin's trylast comes after the engine's"


async def test_every_implementation_deferring_is_a_501():
    async with stub_app() as stub:
        stub.app.state.plugin_stack.pm.unregister(name="engine")
        response = await stub.call("loads")
    assert response.status_code == 501 and response.json()["error"]["type"] == "not_implemented"


async def test_no_hook_is_called_before_the_engine_is_ready():
    called = []
    async with stub_app({"p": plugin_with("loads", lambda: called.append(1))}) as stub:
        stub.control.seam.ready = lambda: False
        response = await stub.call("loads")
    assert response.status_code == 503 and called == []


async def test_trace_logs_every_call_and_the_awaited_part(caplog):
    async def loads(control):
        return None

    logger = logging.getLogger("engine_plugins.host.trace")
    logger.addHandler(caplog.handler)  # the trace logger has its own handler and does not propagate
    try:
        async with stub_app({"mine": plugin_with("loads", loads)}, Settings(plugins=frozenset(), trace=True)) as stub:
            await stub.ok("loads")
            await stub.ok("is_paused")
    finally:
        logger.removeHandler(caplog.handler)
    lines = [r.getMessage() for r in caplog.records if r.name == "engine_plugins.host.trace"]
    expected = [
        "hook loads: mine returned an awaitable in",
        "hook loads: mine deferred after",
        "hook loads: engine returned an awaitable in",
        "hook loads: engine answered LoadsResult after",
        "hook is_paused: engine returned PauseState in",
    ]
    assert len(lines) == len(expected), lines
    for line, start in zip(lines, expected):
        assert line.startswith(start), line
