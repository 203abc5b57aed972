"""Keeps the in-flight registry exact on SGLang's TokenizerManager, for requests on every route.

A request is in flight from the moment SGLang creates its request state (before its pause gate
and its tokenizer) until SGLang deletes that state (finished, aborted, or dropped before it
reached the scheduler), whichever route made it: ``/generate``, ``/v1/completions``, the
contract's. So the registry follows the TokenizerManager's request states themselves, through a
dict that reports each state created and deleted (:class:`TrackedStates`).

Hooks on the TokenizerManager, registered with SGLang's own hook registry (so that SGLang's log
names this plugin), complete the fence (:func:`register_hooks`):

- construction: the TokenizerManager is checked and its request states tracked, at startup;
- the dispatch mark (SGLang's own, or before 0.5.20 its two sends): the entry is marked
  dispatched, and an abort that came while the request was held is sent again, since SGLang's
  first abort reached a scheduler that did not know it;
- the request entry: while a request is held (at the pause gate, or tokenizing), an abort ends
  it at once with the answer SGLang gives for a request aborted in its waiting queue; otherwise
  an abort-all during a pause would return only after resume;
- SGLang's own abort (its own machinery's calls, and ``POST /abort_request`` where SGLang's route
  is kept): the held requests it covers are ended the same way, instead of running after resume
  (:meth:`Tracker.native_abort`, called by the hook of :mod:`.native_calls`);
- SGLang's own pause in ``abort`` mode (where SGLang's route is kept): requests reaching the
  gate meanwhile keep waiting for ``continue_generation``, as SGLang means them to;
- on 0.5.17, whose abort marks request states and ends a marked one before dispatch with
  ``RequestAbortedError``: that request gets the answer of a held request ended by an abort,
  and an ``n > 1`` request's logical state is dispatched with its first sample;
- before 0.5.19, every change of the TokenizerManager's weight version: each request's tokens so
  far are recorded under the version they leave, and its final output gets the spans
  (:mod:`.version_labels`), as SGLang's scheduler does from 0.5.19.

The SGLang behaviour each step relies on is in ``docs/engine-notes.md`` ("SGLang").
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Optional

from engine_plugins.core.cache_scope import version_salt
from engine_plugins.contract.errors import StartupError
from engine_plugins.core.registry import InFlight, InFlightRegistry
from engine_plugins.engines.sglang import call_context
from engine_plugins.engines.sglang.facade import SGLangEngine, SGLangNames
from engine_plugins.engines.sglang.version_labels import VersionLabels, final_outputs


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
        """Add states (SGLang adds a request's states this way)."""
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
    """The registry of one TokenizerManager, fed by its request states and the hooks."""

    def __init__(self, sglang: SGLangEngine, scope_prefix_cache: bool = True) -> None:
        self.sglang = sglang
        self.registry = InFlightRegistry()
        self.scope_prefix_cache = scope_prefix_cache
        """Salt each request's prefix cache by the version it was admitted under (:mod:`..cache_scope`)."""
        self._held_aborted = asyncio.Event()
        self._abort_mode_pauses = 0
        self._own_aborts = 0
        sglang.replace_request_states(lambda states: TrackedStates(states, self))
        self.scheduler_pause: Optional[str] = None
        """``in_place`` or ``retract`` while SGLang's scheduler is paused, else None: the one record
        of it, kept by the hooks on the TokenizerManager's pause and continue, which every caller goes through."""
        self.labels: Optional[VersionLabels] = None if sglang.names.engine_weight_version else VersionLabels()
        """Each request's weight-version changes, where SGLang labels no tokens (before 0.5.19)."""

    def state_created(self, rid: str, state: Any) -> None:
        """SGLang accepted *rid* (health checks excepted: they are not requests)."""
        if isinstance(rid, str) and not rid.startswith(self.sglang.names.health_check_prefix):
            self.registry.add(rid, dispatched=self.sglang.names.state_dispatched(state))

    def state_deleted(self, rid: str) -> None:
        """SGLang freed *rid*'s state: the request is over.

        SGLang does this in its output loop before it wakes the request's task, so the answer is
        written well after; an abort with wait waits for that too (:mod:`..delivery`)."""
        if self.labels is not None:
            # Its last output has arrived: a change made before it is handed on is not its tokens'.
            self.labels.finished(rid, self.sglang.weight_version())
        self.registry.release(rid)

    def version_changing(self, new_version: str) -> None:
        """The TokenizerManager's weight version is about to become *new_version* (before 0.5.19):
        every request's tokens so far were made under the one in force."""
        if self.labels is not None:
            self.labels.changing(self.sglang.weight_version(), new_version, self.sglang.output_tokens())

    def cache_salt(self, rid: str, extra_key: Optional[str]) -> Optional[str]:
        """The ``extra_key`` that scopes *rid*'s prefix cache by the version it was admitted under,
        combined with the caller's *extra_key*; None when scoping is off."""
        if not self.scope_prefix_cache:
            return None
        entry = self.registry.get(rid)
        if entry is None:  # every request has one by now (its state is made first); else the version in force
            return version_salt(extra_key, self.registry.generation, self.registry.version, self.registry.weight_loads)
        return version_salt(extra_key, entry.admitted, entry.admitted_version, entry.admitted_loads)

    def dispatched(self, rid: str) -> None:
        """*rid* reached the scheduler; an abort that came while it was held follows it there."""
        entry = self.registry.get(rid)
        if entry is None:
            return
        entry.dispatched = True
        if entry.aborted:
            self.sglang.abort(rid)
        # SGLang 0.5.17 keeps an n > 1 request's logical state until every sample is sent, and
        # never dispatches it: from its first sample on it is in the scheduler, not held (an
        # abort of its rid reaches its samples, by SGLang's own abort_request).
        logical = self.sglang.logical_rid(rid)
        parent = self.registry.get(logical) if logical is not None else None
        if parent is not None and not parent.dispatched:
            self.dispatched(logical)

    def native_abort(self, rid: str, abort_all: bool) -> None:
        """SGLang's own abort reaches held requests too: those it covers, by SGLang's prefix rule,
        are marked aborted and ended now. Not during SGLang's own abort-mode pause (see the module)."""
        # The plugin's own aborts end their held requests themselves; and with none held there
        # is nothing to do (checked first: an abort of n requests calls this n times).
        if self._own_aborts or not self.registry.held() or self._abort_mode_pauses or (not abort_all and not rid):
            return
        held = [e for e in self.registry.select(None) if not e.dispatched and (abort_all or e.rid.startswith(rid))]
        for entry in held:
            entry.aborted = True
        if held:
            self.wake_held()

    @contextlib.contextmanager
    def own_aborts(self) -> Iterator[None]:
        """Within this block, SGLang's abort calls are the plugin's own: the held requests they
        cover are already marked and woken by the seam, so :meth:`native_abort` leaves them."""
        self._own_aborts += 1
        try:
            yield
        finally:
            self._own_aborts -= 1

    async def native_pause(self, pause: Callable[[], Awaitable[Any]], obj: Any) -> Any:
        """Run SGLang's own ``pause_generation`` (``pause()`` calls it with *obj*), noting an
        abort-mode one, and the scheduler's pause once it is in force (whoever called it: the
        plugin, SGLang's route, or code in the server's process).

        A request aborted while it runs is ended by the scheduler's next step; a scheduler pause
        that lands first would keep it (frozen ``in_place``, or retracted to the waiting queue
        with its abort spent) until continue, and an abort with wait would time out. So while
        such aborts are pending an ``in_place`` pause is made a ``retract`` one, and once paused
        their aborts are sent again: the scheduler ends them from its waiting queue at once."""
        mode = self.sglang.names.pause_mode(obj)
        if mode == "in_place" and self.aborted_in_scheduler():
            obj.mode = mode = "retract"
        abort_mode = mode == "abort"
        self._abort_mode_pauses += abort_mode
        try:
            result = await pause()
        finally:
            self._abort_mode_pauses -= abort_mode
        if mode in ("in_place", "retract"):
            self.scheduler_pause = mode
            for entry in self.aborted_in_scheduler():  # those aborted meanwhile too
                self.sglang.abort(entry.rid)
        return result

    def aborted_in_scheduler(self) -> list[InFlight]:
        """The requests aborted after they reached the scheduler that are still in flight."""
        return [e for e in self.registry.select(None) if e.aborted and e.dispatched]

    async def native_continue(self, continue_: Any) -> Any:
        """Run SGLang's own ``continue_generation`` (the awaitable *continue_*): the scheduler
        runs again and the pause gate is open."""
        result = await continue_
        self.scheduler_pause = None
        return result

    def wake_held(self) -> None:
        """Tell the requests held before the scheduler that some of them were aborted."""
        self._held_aborted.set()
        self._held_aborted = asyncio.Event()

    def track(self, inner: AsyncIterator[dict], obj: Any) -> AsyncIterator[dict]:
        """Run SGLang's ``generate_request`` generator, ending it at once if aborted while held;
        before 0.5.19, its final outputs get their weight-version spans."""
        tracked = self._track(inner, obj)
        return tracked if self.labels is None else self._labelled(tracked, obj)

    async def _labelled(self, outputs: AsyncIterator[dict], obj: Any) -> AsyncIterator[dict]:
        """*outputs*, each final one with its spans (:mod:`.version_labels`)."""
        assert self.labels is not None
        try:
            async for out in outputs:
                for meta_info in final_outputs(out):
                    self.labels.label(meta_info, self.sglang.weight_version())
                yield out
        finally:
            await outputs.aclose()  # type: ignore[attr-defined]
            self.labels.forget(self.sglang.names.request_rid(obj), self.sglang.holds)

    async def _track(self, inner: AsyncIterator[dict], obj: Any) -> AsyncIterator[dict]:
        """:meth:`track` without the labels."""
        try:
            out = await self._first_step(inner, obj)
        except StopAsyncIteration:
            return
        except Exception as exc:
            # SGLang 0.5.17 ends a request its own abort marked before dispatch with an error
            # (an abort-all reaches held requests, and one can pass the gate before the plugin
            # ends it): the same answer as for a held request the plugin ends.
            if not self.sglang.names.marked_abort(exc, obj):
                self.drop_undispatched(obj)
                raise
            out = None
        if out is None:
            self.drop_undispatched(obj)
            yield self.sglang.aborted_before_dispatch(obj)
            return
        ended = False
        try:
            while True:
                yield out
                try:
                    out = await inner.__anext__()
                except StopAsyncIteration:
                    ended = True
                    return
        finally:
            # A caller that stops early (a cancelled partial generation) closes SGLang's
            # generator too, whose failure path aborts the request in the scheduler (0.5.20 on).
            if not ended:
                self.abort_on_close(obj)
            await inner.aclose()

    def abort_on_close(self, obj: Any) -> None:
        """Before its generator is closed early, abort *obj*'s dispatched requests where SGLang
        would only drop their states (before 0.5.20), leaving the scheduler to run them to the end.
        The abort must come first: SGLang ignores one for a rid it no longer holds."""
        if self.sglang.names.aborts_on_close:
            return
        rid = self.sglang.names.request_rid(obj)
        for one in rid if isinstance(rid, list) else [rid]:
            entry = self.registry.get(one) if isinstance(one, str) else None
            if entry is not None and entry.dispatched:
                self.sglang.abort(one)

    def drop_undispatched(self, obj: Any) -> None:
        """Delete the states *obj*'s requests still hold that never reached the scheduler, once
        SGLang's generator has ended before dispatch (an error, or the plugin's end of a held
        request): SGLang 0.5.12 and 0.5.13 never delete them there, 0.5.14 to 0.5.16 only on an
        error, and no output would ever delete them, so the request would stay in flight. Where
        SGLang has deleted them, nothing is left to do."""
        rid = self.sglang.names.request_rid(obj)
        for one in rid if isinstance(rid, list) else [rid]:
            entry = self.registry.get(one) if isinstance(one, str) else None
            if entry is not None and not entry.dispatched:
                self.sglang.drop_state(one)

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
                # Read here, not before the first step: a request sent without a rid gets one
                # when SGLang normalises it, inside that step.
                rid = self.sglang.names.request_rid(obj)
                # Batch requests (a list of rids) are not ended early: their held members are
                # aborted when they are dispatched (see ``dispatched``).
                entry = self.registry.get(rid) if isinstance(rid, str) else None
                if entry is not None and entry.aborted and not entry.dispatched:
                    # Cancelled at the gate or in the tokenizer: SGLang drops the undispatched state.
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
            # The caller went before the first output (a non-streaming request has only its
            # last): as for a generator closed early, the scheduler must hear of it.
            self.abort_on_close(obj)
            step.cancel()
            self.drop_undispatched(obj)
            raise


_trackers: "weakref.WeakKeyDictionary[Any, Tracker]" = weakref.WeakKeyDictionary()


@dataclass
class RegisteredHooks:
    """The TokenizerManager hooks :func:`register_hooks` gave SGLang's registry."""

    names: SGLangNames
    originals: dict[str, Any]
    """Each hooked method as it was before SGLang applied the hook."""

    def targets(self) -> list[str]:
        """``TokenizerManager.<method>`` for each hook, for the startup log."""
        return [f"TokenizerManager.{method}" for method in self.originals]

    def check_applied(self) -> None:
        """Raise :class:`StartupError` unless SGLang has applied every hook: it only logs one it
        could not apply, and without them the registry would silently miss requests."""
        missing = [m for m, original in self.originals.items() if self.names.tokenizer_manager_method(m) is original]
        if missing:
            raise StartupError(
                f"engine_plugins: SGLang {self.names.version} did not apply the plugin's hooks on "
                f"{', '.join('TokenizerManager.' + m for m in missing)} (SGLang logs why, at ERROR)"
            )


def tracker_for(names: SGLangNames, tm: Any, scope_prefix_cache: bool = True) -> Tracker:
    """The tracker of the TokenizerManager *tm*, made on first use: *tm* is checked
    (:class:`~.facade.SGLangEngine`) and its request states tracked from then on."""
    tracker = _trackers.get(tm)
    if tracker is None:
        tracker = _trackers[tm] = Tracker(SGLangEngine(names, tm), scope_prefix_cache)
    return tracker


async def _refuse(message: str) -> AsyncIterator[dict]:
    """A generator that refuses the request on its first step, as SGLang's own checks do."""
    raise ValueError(message)
    yield {}  # pragma: no cover - makes this an async generator


def register_hooks(names: SGLangNames, scope_prefix_cache: bool = True, exact_token_versions: bool = True) -> RegisteredHooks:
    """Register the TokenizerManager hooks with SGLang's hook registry, which applies them once
    every plugin has loaded (and only once per process). *scope_prefix_cache*: salt every
    request's prefix cache by the version it was admitted under. *exact_token_versions*: where
    the plugin labels the tokens, have the scheduler send each one as it is made."""

    def after_init(result: Any, tm: Any, *args: Any, **kwargs: Any) -> None:
        tracker_for(names, tm, scope_prefix_cache)
        call_context.note_built(tm)  # an in-process engine's is in no global state

    def create_tokenized_object(original: Any, tm: Any, *args: Any, **kwargs: Any) -> Any:
        # Every route's requests pass here, one (sub-)request at a time, just before dispatch:
        # the last point where the tokenized request's extra_key still reaches the radix cache.
        tokenized = original(tm, *args, **kwargs)
        names.scope_prefix_cache(tokenized, tracker_for(names, tm).cache_salt)
        if exact_token_versions:
            names.send_every_token(tokenized)
        return tokenized

    def generate_request(original: Any, tm: Any, obj: Any, request: Any = None) -> AsyncIterator[dict]:
        tracker = tracker_for(names, tm)
        problem = tracker.sglang.out_of_vocabulary(obj)
        if problem is not None:
            # SGLang's routes answer a ValueError from the generator as a 400 with its message.
            return _refuse(problem)
        return tracker.track(original(tm, obj, request), obj)

    hooks = {
        "__init__": (after_init, "AFTER"),
        "generate_request": (generate_request, "AROUND"),
        "_create_tokenized_object": (create_tokenized_object, "AROUND"),
        **names.dispatch_hooks(lambda tm, rid: tracker_for(names, tm).dispatched(rid)),
        **names.weight_version_hooks(lambda tm, version: tracker_for(names, tm).version_changing(version)),
        # pause_generation, continue_generation, abort_request: :mod:`.native_calls`, which
        # passes SGLang's own calls to the tracker's native_pause, native_continue, native_abort.
    }
    originals = {method: names.tokenizer_manager_method(method) for method in hooks}
    for method, (hook, kind) in hooks.items():
        names.hook_tokenizer_manager(method, hook, kind)
    return RegisteredHooks(names, originals)
