"""``ENGINE_PLUGINS_TRACE=1``: one log line per hook implementation called, with its duration.

Pluggy's hook-call monitoring times the call itself, which for an ``async def`` implementation
only makes the coroutine; the dispatcher then logs the awaited part with :func:`log_awaited`.
The lines go to the ``engine_plugins.host.trace`` logger through a handler of its own, since neither
engine shows this package's INFO lines by default (vLLM configures only its ``vllm`` logger,
SGLang configures logging after plugins load).
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any, Callable, Mapping, Sequence

import pluggy

logger = logging.getLogger("engine_plugins.host.trace")


def install(pm: pluggy.PluginManager) -> Callable[[], None]:
    """Log every hook call made through *pm* and its duration; returns the undo function."""
    _ensure_handler()
    # Monitoring wraps one synchronous call at a time (nothing awaits between before and
    # after), so a stack of start times is exact even with many requests in flight.
    starts: list[float] = []

    def before(hook_name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, Any]) -> None:
        starts.append(time.perf_counter())

    def after(outcome: pluggy.Result, hook_name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, Any]) -> None:
        ms = (time.perf_counter() - starts.pop()) * 1000
        plugins = ",".join(impl.plugin_name for impl in impls)
        if outcome.exception is not None:
            what = f"raised {type(outcome.exception).__name__}"
        else:
            result = outcome.get_result()
            what = "deferred" if result is None else f"returned {_kind(result)}"
        logger.info("hook %s: %s %s in %.2f ms", hook_name, plugins, what, ms)

    return pm.add_hookcall_monitoring(before, after)


def log_awaited(hook_name: str, plugin: str, result: Any, ms: float) -> None:
    """Log the awaited part of an ``async`` implementation's call."""
    what = "deferred" if result is None else f"answered {_kind(result)}"
    logger.info("hook %s: %s %s after %.2f ms awaited", hook_name, plugin, what, ms)


def _kind(value: Any) -> str:
    return "an awaitable" if inspect.isawaitable(value) else type(value).__name__


def _ensure_handler() -> None:
    if not any(getattr(h, "_engine_plugins_trace", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s engine_plugins trace: %(message)s"))
        handler._engine_plugins_trace = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    # The handler above prints the lines; the root's (once an engine configures it) must not again.
    logger.propagate = False
