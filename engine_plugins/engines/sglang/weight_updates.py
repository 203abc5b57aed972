"""SGLang's own weight-update routes, as the RL frameworks call them, made safe by the plugin.

Every ``update_weights_from_{disk,tensor,distributed,ipc}`` call, whichever route or code made
it, passes through :meth:`WeightUpdates.run` (an AROUND hook on the TokenizerManager), which:

- **pauses in place for an update that arrives unpaused**, and resumes after it. SGLang would
  otherwise take its model-update writer lock, which waits, without a time limit, for every
  request in flight to finish while new ones queue behind it; with the pause the update runs at
  once between two decode steps, and the requests in flight go on under the new weights (their
  spans say from which token).
- **never lets a cache flush fail the update.** SGLang flushes after loading by default
  (``flush_cache``), and refuses the flush while requests are running or frozen in place: on
  0.5.21+ the update then answers 400 although the weights were loaded, and on 0.5.20 the
  scheduler dies on an assert. Where the flush would be refused, the plugin asks for none: the
  prefix cache is scoped anew instead (:mod:`engine_plugins.core.cache_scope`), so that no request
  admitted after the update reuses KV computed before it, and the kept requests keep theirs.
  Under a ``retract`` pause (the contract's keep, which promises a recompute under the new
  weights) the flush runs even when the caller asked for none: a retracted request is prefilled
  again under the salt it was admitted with, and would otherwise reuse its prompt's old KV.
- **gives a sessionless tensor or distributed update its session** (SGLang 0.5.21+ refuses one
  made outside ``begin_weight_update`` / ``end_weight_update``, which slime, AReaL, verl and
  ROLL do not call): it opens one around the call and closes it after, unless the caller has one
  open.
- **refuses a tensor, distributed or IPC update on plain ``--dp-size`` replicas** with a 400
  naming the disk update, which is the one SGLang's replicas take (SGLang asserts, a bare 500),
  and the distributed update's ``init_weights_update_group`` likewise.
- **makes the version the update carries (``weight_version``) one contract bump**, applied once
  the weights are loaded, through the ``update_weight_version`` hook (so spans, the staleness
  fence, ``/v1/loads`` and the metrics all see it); the same version sent again (slime sends it
  with every chunk) is no second bump. SGLang itself would set the version only when the call
  succeeds, after its scheduler had already stamped it, leaving two versions after a refused flush.

The SGLang behaviour each step relies on is in ``docs/engine-notes.md`` ("SGLang weight updates").
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Optional

from engine_plugins.engines.sglang import call_context
from engine_plugins.engines.sglang.facade import SGLangNames
from engine_plugins.engines.sglang.tracking import tracker_for

logger = logging.getLogger(__name__)

UPDATE_METHODS = (
    "update_weights_from_disk",
    "update_weights_from_tensor",
    "update_weights_from_distributed",
    "update_weights_from_ipc",
)
"""The TokenizerManager's weight-update methods, one per SGLang route of the same name."""

SESSION_METHODS = ("update_weights_from_tensor", "update_weights_from_distributed")
"""The updates SGLang 0.5.21+ runs only inside a weight-update session."""

Bump = Callable[[str, Any], Awaitable[Any]]
"""``bump(version, http_request)``: the contract's version bump (abort nothing)."""
Pause = Callable[[Any], Awaitable[Any]]
"""``pause(http_request)`` / ``resume(http_request)``: the contract's keep pause (KV kept) and resume."""


class WeightUpdates:
    """The plugin's part in SGLang's weight updates, for the TokenizerManager of this process."""

    def __init__(self, names: SGLangNames, bump: Bump, pause: Pause, resume: Pause, is_paused: Callable[[], bool]) -> None:
        self.names = names
        self._bump = bump
        self._pause = pause
        self._resume = resume
        self._is_paused = is_paused
        self.session_open = False
        """Whether a weight-update session opened through the TokenizerManager is open."""

    async def run(self, method: str, original: Callable[..., Awaitable[Any]], tm: Any, obj: Any, request: Any) -> Any:
        """Run SGLang's *method* on *obj* as the module says; returns SGLang's own answer
        (``(success, message, ...)``), its message naming what the plugin did."""
        names = self.names
        refused = self._refused_on_replicas(method)
        if refused is not None:
            return names.update_answer(method, False, refused)
        version = names.take_weight_version(obj)
        tracker = tracker_for(names, tm)
        paused_here = not self._is_paused()
        if paused_here:
            await self._pause(request)
        try:
            notes = []
            can_flush = self._flush_would_run(tracker)
            if names.wants_flush(obj) and not can_flush:
                names.set_flush(obj, False)
                notes.append("The cache flush was skipped (requests hold KV); the prefix cache is scoped anew instead.")
            elif not names.wants_flush(obj) and can_flush and tracker.scheduler_pause == "retract":
                # A retracted request is prefilled again under the salt it was admitted with:
                # without the flush it would reuse its prompt's KV from the old weights.
                names.set_flush(obj, True)
                notes.append("The cache was flushed: the requests the retract pause holds are recomputed under the new weights.")
            session = method in SESSION_METHODS and names.has_weight_update_session() and not self.session_open
            if session:
                opened = await names.begin_weight_update(tm, request)
                if not opened[0]:
                    return names.update_answer(method, False, f"begin_weight_update failed: {opened[1]}")
            try:
                answer = await original(tm, obj, request)
            finally:
                if session:
                    closed = await names.end_weight_update(tm, request)
            if session and not closed[0]:
                return names.update_answer(method, False, f"{answer[1]}; end_weight_update failed: {closed[1]}")
            if session:
                notes.append("The plugin opened and closed a weight-update session around it.")
            if not answer[0]:
                return answer
            tracker.registry.weights_loaded()
            if version is not None:
                await self._bump(version, request)
                notes.append(f"Weight version updated to {version}.")
            return names.with_message(answer, " ".join([answer[1].rstrip(".") + ".", *notes]))
        finally:
            if paused_here:
                await self._resume(request)

    def _refused_on_replicas(self, method: str) -> Optional[str]:
        """Why *method* cannot run on plain ``--dp-size`` replicas (SGLang asserts a single
        replica for all but the disk update, which its route answers as a bare 500); None when it can."""
        replicas = self.names.replicas()
        if method == "update_weights_from_disk" or replicas <= 1:
            return None
        return (f"{method} does not work with --dp-size {replicas}: SGLang's data-parallel replicas take "
                "their weights only from /update_weights_from_disk; nothing was loaded")

    async def init_group(self, original: Callable[..., Awaitable[Any]], tm: Any, obj: Any, request: Any) -> Any:
        """SGLang's ``init_weights_update_group`` (the distributed update's first step), refused
        on replicas as the distributed update is."""
        refused = self._refused_on_replicas("init_weights_update_group")
        if refused is not None:
            return False, refused.replace("; nothing was loaded", "; no group was made")
        return await original(tm, obj, request)

    def _flush_would_run(self, tracker: Any) -> bool:
        """Whether SGLang's scheduler would flush its cache now: it refuses while requests are
        running or frozen in place; under ``retract`` (all of them back in the waiting queue)
        it flushes from 0.5.21 on, while 0.5.20 also wants the waiting queue empty."""
        if not any(e.dispatched for e in tracker.registry.select()):
            return True
        return tracker.scheduler_pause == "retract" and self.names.flushes_while_retracted()

    async def begin_session(self, original: Callable[..., Awaitable[Any]], tm: Any, obj: Any, request: Any) -> Any:
        """SGLang's ``begin_weight_update``, noting the session open when it is."""
        answer = await original(tm, obj, request)
        if answer[0]:
            self.session_open = True
        return answer

    async def end_session(self, original: Callable[..., Awaitable[Any]], tm: Any, obj: Any, request: Any) -> Any:
        """SGLang's ``end_weight_update``: the session is closed, whatever it answers."""
        try:
            return await original(tm, obj, request)
        finally:
            self.session_open = False


async def _about(tm: Any, update: Awaitable[Any]) -> Any:
    """Await *update* with the contract's calls about *tm* (an in-process engine's is in no
    global state)."""
    with call_context.acting_on(tm):
        return await update


def register_weight_update_hooks(names: SGLangNames, updates: WeightUpdates) -> dict[str, Any]:
    """Register :class:`WeightUpdates`' hooks on the TokenizerManager with SGLang's hook registry;
    returns each hooked method as it was, for the check that SGLang applied them."""
    hooks: dict[str, Callable[..., Any]] = {}
    # Every supported SGLang has the four (the startup probe checks); an engine's fake may not.
    for method in (m for m in UPDATE_METHODS if names.tokenizer_manager_method(m) is not None):
        def update(original: Any, tm: Any, obj: Any, request: Optional[Any] = None, *, _method: str = method) -> Any:
            return _about(tm, updates.run(_method, original, tm, obj, request))

        hooks[method] = update
    if names.tokenizer_manager_method("init_weights_update_group") is not None:
        hooks["init_weights_update_group"] = lambda original, tm, obj, request=None: updates.init_group(original, tm, obj, request)
    if names.has_weight_update_session():
        hooks["begin_weight_update"] = lambda original, tm, obj, request=None: updates.begin_session(original, tm, obj, request)
        hooks["end_weight_update"] = lambda original, tm, obj, request=None: updates.end_session(original, tm, obj, request)
    originals = {method: names.tokenizer_manager_method(method) for method in hooks}
    for method, hook in hooks.items():
        names.hook_tokenizer_manager(method, hook, "AROUND")
    return originals
