"""The TokenizerManager's own control methods, called as Python, answered as the plugin's routes.

RL frameworks that hold SGLang in their own process call the TokenizerManager's methods, not
its routes: verl awaits ``tokenizer_manager.pause_generation(PauseGenerationReqInput(mode="abort"))``
in the server's process, ROLL calls ``engine.tokenizer_manager.abort_request(rid)`` on an
in-process ``sglang.Engine``. AROUND hooks on those methods (registered with SGLang's hook
registry) give such calls what the plugin's routes (:mod:`.native_routes`) give, through the
same code:

- ``pause_generation``: ``abort`` mode returns once the requests past the gate are out, with
  their tokens (SGLang's own polls every second); ``in_place`` and ``retract`` are SGLang's own.
  Every mode is recorded as the contract's pause, so ``is_paused``, the loads and a resume know it.
- ``continue_generation``: the contract's resume.
- ``abort_request(rid, abort_all)``: the route's exact abort. SGLang's method is synchronous, so
  the abort itself is immediate (SGLang's abort of the dispatched requests covered is sent before
  it returns) and the contract's abort follows as a task on the running loop: it ends requests
  held at the pause gate, turns an ``in_place`` pause into ``retract`` so that aborted running
  requests come back, and goes through the ``abort`` hook (plugins see it, counted). Calls made
  by SGLang's own machinery (its abort-mode pause loop, a weight update's ``abort_all_requests``,
  a disconnected client) keep SGLang's abort, plus the end of the held requests it covers, as
  before: the native route never made those.
- ``update_weight_version`` (0.5.19 on, where the TokenizerManager has it): the contract's bump,
  in-flight requests kept (the method itself never aborts; SGLang's route does, before calling it).

The plugin's own calls of these methods (:class:`~.facade.SGLangEngine`, marked by
:func:`~.call_context.own_call`) reach SGLang's originals, through the tracker's bookkeeping.
With ``ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES=false``, as SGLang's routes are kept, so are these
methods (only the tracker's bookkeeping is added).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Optional

from engine_plugins.contract.schema import UpdateWeightVersionRequest
from engine_plugins.engines.sglang import call_context, native_routes
from engine_plugins.engines.sglang.facade import SGLangNames
from engine_plugins.engines.sglang.tracking import tracker_for
from engine_plugins.host.http_api import RouteContext

logger = logging.getLogger(__name__)


class NativeCalls:
    """The hooks on one process's TokenizerManager class; each acts on the instance it is called on."""

    def __init__(self, names: SGLangNames, ctx: RouteContext) -> None:
        self.names = names
        self.ctx = ctx
        self._tasks: set[asyncio.Task] = set()

    def _redirected(self) -> bool:
        """Whether a call not the plugin's gets the route's behaviour (as the routes are replaced)."""
        return self.ctx.settings.replace_native_routes and not call_context.is_own_call()

    # --- the hooks (AROUND: ``hook(original, tm, ...)``) ------------------------------------------

    def pause_generation(self, original: Callable, tm: Any, obj: Any) -> Any:
        """``await tm.pause_generation(obj)``: :func:`.native_routes.pause` for a caller's call."""
        if not self._redirected():
            return tracker_for(self.names, tm).native_pause(lambda: original(tm, obj), obj)
        return self._on(tm, native_routes.pause(self.ctx, self.names.pause_mode(obj)))

    def continue_generation(self, original: Callable, tm: Any, obj: Any) -> Any:
        """``await tm.continue_generation(obj)``: the contract's resume for a caller's call."""
        if not self._redirected():
            return tracker_for(self.names, tm).native_continue(original(tm, obj))
        return self._on(tm, native_routes.resume(self.ctx))

    def update_weight_version(self, original: Callable, tm: Any, obj: Any) -> Any:
        """``await tm.update_weight_version(obj)``: the contract's bump, keeping in-flight requests."""
        if not self._redirected():
            return original(tm, obj)
        body = UpdateWeightVersionRequest(new_version=str(obj.new_version), abort_all_requests=False)
        return self._on(tm, self.ctx.ops.update_weight_version(body))

    def abort_request(self, original: Callable, tm: Any, rid: str = "", abort_all: bool = False) -> None:
        """``tm.abort_request(rid, abort_all)``: the route's exact abort for a caller's call, made
        at once where SGLang makes it and completed by a task (see the module)."""
        tracker = tracker_for(self.names, tm)
        loop = _running_loop()
        if not self._redirected() or loop is None or self.names.called_by_sglang():
            tracker.native_abort(rid, abort_all)
            return original(tm, rid, abort_all)
        with call_context.acting_on(tm):
            control = self.ctx.hooks.control()
            targets = native_routes.abort_targets(control, rid, abort_all)
        if targets.named_nothing:
            return original(tm, rid, abort_all)  # SGLang's warning: an abort naming nothing
        if targets.request_ids is not None and not targets.request_ids:
            return None  # an unknown rid: nothing to abort
        # SGLang's abort, now, of what it covers past the scheduler (SGLang's original: no hook).
        if abort_all:
            original(tm, "", True)
        else:
            for entry in control.registry.select(targets.request_ids):
                if entry.dispatched:
                    original(tm, entry.rid, False)
        self._later(loop, tm, native_routes.abort(self.ctx, targets, wait=False))
        return None

    # --- helpers ------------------------------------------------------------------------------

    async def _on(self, tm: Any, operation: Any) -> None:
        """Run the contract's *operation* about *tm*; SGLang's methods answer None."""
        with call_context.acting_on(tm):
            await operation

    def _later(self, loop: asyncio.AbstractEventLoop, tm: Any, operation: Any) -> None:
        """Run *operation* about *tm* as a task of *loop*, kept until done, its failure logged."""
        task = loop.create_task(self._on(tm, operation))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("engine_plugins: the contract's abort after SGLang's abort_request failed", exc_info=task.exception())


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    """The event loop running in this thread, or None (a call from a thread of its own)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def register_native_call_hooks(names: SGLangNames, ctx: RouteContext) -> dict[str, Any]:
    """Register :class:`NativeCalls`' hooks on the TokenizerManager with SGLang's hook registry
    (``update_weight_version`` where the TokenizerManager has it); returns each hooked method
    as it was, for the check that SGLang applied them."""
    calls = NativeCalls(names, ctx)
    hooks: dict[str, Callable[..., Any]] = {
        "pause_generation": calls.pause_generation,
        "continue_generation": calls.continue_generation,
        "abort_request": calls.abort_request,
    }
    if names.engine_weight_version and names.tokenizer_manager_method("update_weight_version") is not None:
        hooks["update_weight_version"] = calls.update_weight_version
    originals = {method: names.tokenizer_manager_method(method) for method in hooks}
    for method, hook in hooks.items():
        names.hook_tokenizer_manager(method, hook, "AROUND")
    return originals
