"""How the contract's hooks are called: one implementation at a time, awaited, until one answers.

Pluggy's own ``firstresult`` call stops at the first implementation that returns anything but
None, and an ``async def`` implementation returns a coroutine even when it will defer, so pluggy
alone would take the coroutine for the answer. :func:`first_answer` calls the implementations in
pluggy's order itself, awaiting each (through pluggy, one implementation at a time, so that
pluggy's hook-call monitoring sees every call).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import time
import weakref
from typing import Any, Callable, Mapping, Optional

import pluggy

from engine_plugins.host import trace
from engine_plugins.core.control import RolloutControl, abort_reason
from engine_plugins.contract.errors import ContractError
from engine_plugins.contract.schema import AbortResult

# The HTTP request being answered, so that the aborts the control makes inside a route (pause,
# version bump) reach the abort hook with the request that caused them.
_http_request: contextvars.ContextVar[Any] = contextvars.ContextVar("engine_plugins_http_request", default=None)


INTERNAL_ERROR = "internal error; the server log has the details"
"""The message of a 500: what failed is logged with its traceback, never sent (an exception's
text can carry a client's input back, or the server's internals out)."""


class PluginError(Exception):
    """A hook implementation raised something other than a ContractError: a 500 naming it."""

    def __init__(self, plugin: str, hook: str, error: Exception) -> None:
        super().__init__(f"plugin {plugin!r} failed in hook {hook!r}: {type(error).__name__}: {error}")
        self.plugin = plugin
        self.hook = hook
        self.error = error

    def answer(self) -> str:
        """The 500's message: the plugin and hook, not the exception (which only the log has)."""
        return f"plugin {self.plugin!r} failed in hook {self.hook!r}: {INTERNAL_ERROR}"


# Per plugin manager and hook: its implementations as last seen, and a caller of each one alone.
# Building those callers costs more than the hook call itself, so they are made once per set of
# implementations, not on every request.
_CALLERS: "weakref.WeakKeyDictionary[pluggy.PluginManager, dict[str, tuple[tuple, list]]]" = weakref.WeakKeyDictionary()


def _callers(pm: pluggy.PluginManager, name: str) -> list:
    """``(impl, caller of impl alone)`` for hook *name*, in the order pluggy calls them."""
    impls = tuple(getattr(pm.hook, name).get_hookimpls())
    by_hook = _CALLERS.setdefault(pm, {})
    cached = by_hook.get(name)
    if cached is None or cached[0] != impls:
        # get_hookimpls() lists them in registration order, pluggy calls them from the end.
        callers = [
            (impl, pm.subset_hook_caller(name, remove_plugins=[i.plugin for i in impls if i is not impl]))
            for impl in reversed(impls)
        ]
        cached = by_hook[name] = (impls, callers)
    return cached[1]


async def first_answer(pm: pluggy.PluginManager, name: str, kwargs: Mapping[str, Any], trace_calls: bool = False) -> Any:
    """Call hook *name*'s implementations in pluggy's order until one answers.

    Pluggy's order: the last registered first, ``tryfirst`` ones before and ``trylast`` ones
    after the rest. Each result is awaited if it is awaitable. Returns the first answer that is
    not None, or None when every implementation deferred. A :class:`ContractError` (or a
    :class:`PluginError` from a nested hook call) propagates as it is; any other exception is
    raised as a :class:`PluginError` naming the implementation's plugin.
    """
    for impl, only_this in _callers(pm, name):
        try:
            result = only_this(**kwargs)
            if inspect.isawaitable(result):
                started = time.perf_counter()
                result = await result
                if trace_calls:
                    trace.log_awaited(name, impl.plugin_name, result, (time.perf_counter() - started) * 1000)
        except (ContractError, PluginError):
            raise
        except Exception as exc:
            raise PluginError(impl.plugin_name, name, exc) from exc
        if result is not None:
            return result
    return None


class Hooks:
    """The hooks of one engine's plugin stack, called by the routes and by the control.

    *get_control* returns the engine's control, or None until the engine is up (SGLang, for
    one, builds its tokenizer manager after plugins load); every route then answers 503.
    """

    def __init__(self, pm: pluggy.PluginManager, get_control: Callable[[], Optional[RolloutControl]], trace_calls: bool = False) -> None:
        self.pm = pm
        self._get_control = get_control
        self._trace_calls = trace_calls

    def control(self) -> RolloutControl:
        """The engine's control, its own aborts routed through the abort hook; a 503 until it is ready."""
        control = self._get_control()
        if control is None or not control.seam.ready():
            raise ContractError(503, "the engine is not ready yet", "unavailable")
        if control.dispatch_abort is None:
            control.dispatch_abort = functools.partial(self._control_abort, control)
        if control.dispatch_bump is None:
            control.dispatch_bump = functools.partial(self._control_hook, control, "update_weight_version")
        return control

    async def call(self, name: str, http_request: Any = None, **kwargs: Any) -> Any:
        """Call hook *name* with *kwargs*, the control and *http_request*; returns the answer.

        Raises a 501 :class:`ContractError` when every implementation deferred.
        """
        control = self.control()
        token = _http_request.set(http_request)
        try:
            with _reason_of(name, kwargs):
                answer = await first_answer(self.pm, name, {**kwargs, "control": control, "http_request": http_request}, self._trace_calls)
        finally:
            _http_request.reset(token)
        return _answered(answer, name)

    async def _control_abort(self, control: RolloutControl, **kwargs: Any) -> AbortResult:
        # The control's own abort, made inside one of its operations: the route's request is
        # the one in the context.
        with _reason_of("abort", kwargs):
            answer = await first_answer(
                self.pm, "abort", {**kwargs, "control": control, "http_request": _http_request.get()}, self._trace_calls
            )
        answer = _answered(answer, "abort")
        return answer if isinstance(answer, AbortResult) else AbortResult.model_validate(answer)

    async def _control_hook(self, control: RolloutControl, name: str, **kwargs: Any) -> Any:
        # Another of the control's own operations made inside one of its routes (a swap's bump).
        answer = await first_answer(
            self.pm, name, {**kwargs, "control": control, "http_request": _http_request.get()}, self._trace_calls
        )
        return _answered(answer, name)


def _reason_of(name: str, kwargs: Mapping[str, Any]) -> Any:
    """For an abort hook call, its reason as the control's default while it runs (a plugin that
    calls ``control.abort`` without the reason still aborts for it); nothing for other hooks."""
    if name == "abort" and "reason" in kwargs:
        return abort_reason(kwargs["reason"])
    return contextlib.nullcontext()


def _answered(answer: Any, name: str) -> Any:
    if answer is None:
        raise ContractError(501, f"no loaded plugin implements {name!r} on this engine", "not_implemented")
    return answer
