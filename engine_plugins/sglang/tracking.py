"""Keeps the in-flight registry exact on SGLang's TokenizerManager, for requests on every route.

SGLang creates a request's state in ``rid_to_state`` before its pause gate and tokenizer
(``tokenizer_manager.py:926`` then ``938-939``) and deletes it only once the request is over:
finished or aborted by the scheduler (2774, 3638), or dropped before dispatch
(``_release_req_states_on_failure``, 3850-3874). So the registry follows ``rid_to_state``
itself: a dict subclass adds an entry when a state is created and releases it when the state
is deleted, whichever route (``/generate``, ``/v1/completions``, the contract's) made it.

Wrappers on the TokenizerManager class complete the fence:

- ``_mark_state_dispatched`` (1802) marks the entry dispatched, and re-sends the abort of an
  entry aborted while it was held: SGLang's own abort of a rid the scheduler has not seen yet
  is lost.
- ``generate_request`` (895): while a request is held (at the pause gate, or tokenizing), an
  abort cancels its first step. SGLang's own failure path then drops its state, and the caller
  gets the answer SGLang gives for a request aborted in its waiting queue (3596-3640): no tokens,
  ``finish_reason {"type": "abort"}``. Without this, an abort-all during a pause returns only
  after resume.
- ``abort_request`` (2241), SGLang's own abort (``POST /abort_request``, ``abort_all`` too), marks
  the held requests it covers aborted, so they end as above instead of running after resume.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Callable, Optional

from ..registry import InFlightRegistry

logger = logging.getLogger(__name__)

_TRACKER_ATTR = "_engine_plugins_tracker"
_PATCHED_ATTR = "_engine_plugins_patched"


class TrackedStates(dict):
    """SGLang's ``rid_to_state``, telling the tracker when a state is created or deleted."""

    def __init__(self, states: dict, tracker: "Tracker") -> None:
        super().__init__()
        self._tracker = tracker
        self.update(states)

    def __setitem__(self, rid: str, state: Any) -> None:
        super().__setitem__(rid, state)
        self._tracker.state_created(rid, state)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Add states (SGLang's ``_init_req_state`` adds a request's states this way)."""
        new = dict(*args, **kwargs)
        super().update(new)
        for rid, state in new.items():
            self._tracker.state_created(rid, state)

    def setdefault(self, rid: str, default: Any = None) -> Any:
        """As ``dict.setdefault``, reporting a created state."""
        if rid not in self:
            self[rid] = default
        return super().__getitem__(rid)

    def __delitem__(self, rid: str) -> None:
        super().__delitem__(rid)
        self._tracker.state_deleted(rid)

    def pop(self, rid: str, *default: Any) -> Any:
        """As ``dict.pop``, reporting a deleted state."""
        present = rid in self
        value = super().pop(rid, *default)
        if present:
            self._tracker.state_deleted(rid)
        return value

    def popitem(self) -> tuple:
        """As ``dict.popitem``, reporting the deleted state."""
        rid, state = super().popitem()
        self._tracker.state_deleted(rid)
        return rid, state

    def clear(self) -> None:
        """As ``dict.clear``, reporting every deleted state."""
        rids = list(self)
        super().clear()
        for rid in rids:
            self._tracker.state_deleted(rid)


class Tracker:
    """The registry of one TokenizerManager, fed by its ``rid_to_state``."""

    def __init__(self, tm: Any, health_check_prefix: str) -> None:
        self.tm = tm
        self.registry = InFlightRegistry()
        self.health_check_prefix = health_check_prefix
        self._held_aborted = asyncio.Event()
        self._abort_mode_pauses = 0
        tm.rid_to_state = TrackedStates(tm.rid_to_state, self)

    def state_created(self, rid: str, state: Any) -> None:
        """SGLang accepted *rid* (health checks excepted: they are not requests)."""
        if isinstance(rid, str) and not rid.startswith(self.health_check_prefix):
            self.registry.add(rid, dispatched=bool(getattr(state, "dispatched", False)))

    def state_deleted(self, rid: str) -> None:
        """SGLang freed *rid*'s state: the request is over."""
        self.registry.release(rid)

    def dispatched(self, rid: str) -> None:
        """*rid* reached the scheduler; an abort that came while it was held follows it there."""
        entry = self.registry.get(rid)
        if entry is None:
            return
        entry.dispatched = True
        if entry.aborted:
            self.abort_dispatched(rid)

    def abort_dispatched(self, rid: str) -> None:
        """Send SGLang's abort for a dispatched *rid*, even if one was sent before.

        ``abort_request`` sends nothing when ``abort_sent`` is set (2247-2251); an abort sent
        while the request was held reached a scheduler that did not know it, so it is re-armed.
        """
        state = self.tm.rid_to_state.get(rid)
        if state is not None:
            state.abort_sent = False
        self.tm.abort_request(rid)

    def native_abort(self, rid: str, abort_all: bool) -> None:
        """SGLang's own ``abort_request`` (e.g. ``POST /abort_request``) reaches held requests too.

        Held requests it covers, by SGLang's prefix rule, are marked aborted and ended now; its
        ``AbortReq`` alone would reach a scheduler that has not seen them and be lost. Not during
        SGLang's own abort-mode pause, whose repeated abort-all (2272-2279) must leave requests
        arriving at the gate waiting for ``continue_generation``, as SGLang does.
        """
        if self._abort_mode_pauses or (not abort_all and not rid):
            return
        held = [e for e in self.registry.select(None) if not e.dispatched and (abort_all or e.rid.startswith(rid))]
        for entry in held:
            entry.aborted = True
        if held:
            self.wake_held()

    def wake_held(self) -> None:
        """Tell the requests held before the scheduler that some of them were aborted."""
        self._held_aborted.set()
        self._held_aborted = asyncio.Event()

    async def track(self, inner: AsyncIterator[dict], obj: Any) -> AsyncIterator[dict]:
        """Run SGLang's ``generate_request`` generator, ending it at once if aborted while held."""
        try:
            out = await self._first_step(inner, obj)
        except StopAsyncIteration:
            return
        if out is None:
            yield _aborted_before_dispatch(self.tm, obj)
            return
        try:
            while True:
                yield out
                try:
                    out = await inner.__anext__()
                except StopAsyncIteration:
                    return
        finally:
            # A caller that stops early (a cancelled partial generation) closes SGLang's
            # generator too, whose failure path aborts the request in the scheduler (3862-3867).
            await inner.aclose()

    async def _first_step(self, inner: AsyncIterator[dict], obj: Any) -> Optional[dict]:
        """The first output, or None when the request was aborted before it was dispatched."""
        step = asyncio.ensure_future(inner.__anext__())
        try:
            while not step.done():
                signal = asyncio.ensure_future(self._held_aborted.wait())
                await asyncio.wait({step, signal}, return_when=asyncio.FIRST_COMPLETED)
                signal.cancel()
                if step.done():
                    break
                # Batch requests (a list of rids) are not ended early: their held members are
                # aborted when they are dispatched (see ``dispatched``).
                entry = self.registry.get(obj.rid) if isinstance(obj.rid, str) else None
                if entry is not None and entry.aborted and not entry.dispatched:
                    # Lands at the gate or in the tokenizer: SGLang drops the undispatched state.
                    step.cancel()
                    try:
                        return await step
                    except asyncio.CancelledError:
                        if asyncio.current_task().cancelling():
                            raise
                        return None
                if entry is not None and entry.dispatched:
                    break  # from here on an abort goes through the scheduler
            return await step
        except asyncio.CancelledError:
            step.cancel()
            raise


def _aborted_before_dispatch(tm: Any, obj: Any) -> dict:
    """What SGLang answers for a request aborted in its waiting queue (``_handle_abort_req``)."""
    meta_info: dict[str, Any] = {
        "id": obj.rid,
        "finish_reason": {"type": "abort", "message": "Aborted before it reached the scheduler"},
        "weight_version": tm.config_value("weight_version"),
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "weight_versions": [],
    }
    if getattr(obj, "return_logprob", False):
        meta_info.update(input_token_logprobs=[], output_token_logprobs=[], output_token_logprobs_length=0)
    return {"text": "", "output_ids": [], "meta_info": meta_info}


def tracker_for(tm: Any, health_check_prefix: str = "HEALTH_CHECK") -> Tracker:
    """The tracker of *tm*, made (and ``rid_to_state`` wrapped) on first use."""
    tracker = tm.__dict__.get(_TRACKER_ATTR)
    if tracker is None:
        tracker = Tracker(tm, health_check_prefix)
        setattr(tm, _TRACKER_ATTR, tracker)
    return tracker


def patch_tokenizer_manager(cls: type, health_check_prefix: str, on_tracker: Callable[[Tracker], None] = lambda t: None) -> bool:
    """Wrap *cls*'s request entry, dispatch mark, abort and pause; False if already done (a second load)."""
    if cls.__dict__.get(_PATCHED_ATTR):
        return False
    original_generate = cls.generate_request
    original_mark = cls._mark_state_dispatched
    original_abort = cls.abort_request
    original_pause = cls.pause_generation

    def generate_request(self: Any, obj: Any, request: Any = None) -> AsyncIterator[dict]:
        tracker = tracker_for(self, health_check_prefix)
        on_tracker(tracker)
        return tracker.track(original_generate(self, obj, request), obj)

    def _mark_state_dispatched(self: Any, rid: str) -> None:
        original_mark(self, rid)
        tracker_for(self, health_check_prefix).dispatched(rid)

    def abort_request(self: Any, rid: str = "", abort_all: bool = False) -> Any:
        tracker_for(self, health_check_prefix).native_abort(rid, abort_all)
        return original_abort(self, rid, abort_all)

    async def pause_generation(self: Any, obj: Any) -> Any:
        tracker = tracker_for(self, health_check_prefix)
        abort_mode = getattr(obj, "mode", None) == "abort"
        tracker._abort_mode_pauses += abort_mode
        try:
            return await original_pause(self, obj)
        finally:
            tracker._abort_mode_pauses -= abort_mode

    for wrapper, original in (
        (generate_request, original_generate),
        (_mark_state_dispatched, original_mark),
        (abort_request, original_abort),
        (pause_generation, original_pause),
    ):
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(cls, original.__name__, wrapper)
    setattr(cls, _PATCHED_ATTR, True)
    return True
