"""The contract's operations, engine-neutral, on top of one :class:`~engine_plugins.core.seam.EngineSeam`.

This is where the rules from the field notes live once for both engines: the abort fence over
every accepted request, exact ids, event-driven waiting, truthful loads, version bumps that keep
in-flight work, partial generations that return every token with its logprob, and fencing of
stale requests by the order of bumps (:mod:`engine_plugins.core.versions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import uuid
from datetime import datetime, timezone
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterator, Optional, Sequence

from engine_plugins.contract.errors import ContractError
from engine_plugins.core.model_limits import check_request
from engine_plugins.core.registry import InFlight, InFlightRegistry
from engine_plugins.contract.schema import (
    AbortResult,
    LoadsAggregate,
    LoadsResult,
    PartialGenerateResult,
    PauseState,
    RankLoad,
    SamplingParams,
    UpdateWeightVersionResult,
    WeightSwap,
    WeightVersionSpan,
)
from engine_plugins.core.seam import EngineSeam, Generation
from engine_plugins.core.versions import WeightVersions

# Engine ids for contract requests have a fixed length, so that SGLang's prefix-matching abort
# can never reach another request through them.
RID_PREFIX = "ep-"

AbortDispatch = Callable[..., Awaitable[AbortResult]]
"""Called as ``dispatch(request_ids=, wait=, timeout_s=, reason=)``; returns the abort's result."""
BumpDispatch = Callable[..., Awaitable[UpdateWeightVersionResult]]
"""Called as ``dispatch(new_version=, abort_all_requests=)``; returns the bump's result."""

logger = logging.getLogger("engine_plugins")
# How many of the requests an abort with wait left in flight its warning names.
STUCK_NAMED = 8

# The reason of the abort hook call being answered, so that an abort reaching the control through
# a plugin that does not pass the reason on still marks its requests with it.
_abort_reason: contextvars.ContextVar[str] = contextvars.ContextVar("engine_plugins_abort_reason", default="request")

# A cancelled generation's cancel_reason, from the reason of the abort that cut it.
_CANCEL_REASONS = {"request": "abort"}


@contextlib.contextmanager
def abort_reason(reason: str) -> Iterator[None]:
    """Within this block, aborts made without an explicit reason are made for *reason*."""
    token = _abort_reason.set(reason)
    try:
        yield
    finally:
        _abort_reason.reset(token)


@dataclass
class InFlightCounts:
    """The requests one front end holds: how many, and how many per version they were admitted under.

    *age* is, for each name in *by_version*, how many bumps ago its oldest requests were admitted,
    so that counts from several front ends merge in the server's bump order.
    """

    in_flight: int = 0
    by_version: dict[str, int] = field(default_factory=dict)
    age: dict[str, int] = field(default_factory=dict)

    def plus(self, other: "InFlightCounts") -> "InFlightCounts":
        """Both front ends' counts together, oldest version first."""
        # Ages, not generations: a front end that missed a bump (a process that failed one
        # spread) counts one bump fewer from then on, so generations of two processes need not
        # compare, while the recent bumps they both took are as many bumps ago on each. A process
        # holding only newer requests must not put its versions first because it answered first.
        age = dict(self.age)
        for name, bumps in other.age.items():
            age[name] = max(bumps, age.get(name, bumps))
        names = sorted({**self.by_version, **other.by_version}, key=lambda n: -age.get(n, 0))
        by_version = {n: self.by_version.get(n, 0) + other.by_version.get(n, 0) for n in names}
        return InFlightCounts(self.in_flight + other.in_flight, by_version, age)


def new_rid() -> str:
    """A fresh engine id for a contract request: ``ep-`` and 32 hex digits."""
    return RID_PREFIX + uuid.uuid4().hex


class RolloutControl:
    """The contract's operations over one engine. One instance per engine (API server) process."""

    def __init__(self, seam: EngineSeam, abort_timeout_s: float = 30.0) -> None:
        self.seam = seam
        self.registry: InFlightRegistry = seam.registry
        self.abort_timeout_s = abort_timeout_s
        self.pause_mode: Optional[str] = None
        self.dispatch_abort: Optional[AbortDispatch] = None
        """How the control makes its own aborts (pause in ``abort`` mode, a version bump that
        aborts): the plugin stack sets it to the ``abort`` hook, so that plugins see them too.
        None: :meth:`abort` directly."""
        self.dispatch_bump: Optional[BumpDispatch] = None
        """How the control's own operations bump the version (a weight swap's commit): the plugin
        stack sets it to the ``update_weight_version`` hook, with the control the hooks get (on
        a server of several API processes, the one over all of them), so that plugins count it."""
        # Per in-flight contract request: the latest snapshot and the version changes seen
        # while it ran, for spans when the engine reports none.
        self._latest: dict[str, Generation] = {}
        self._version_changes: dict[str, list[tuple[int, str]]] = {}
        self.versions = WeightVersions(seam.weight_version())
        """The order of this server's weight versions: generation 0 now, one more per bump."""
        self.registry.admit_under(self.versions.current, self.versions.current_name)
        # Held while a bump is under way, so that the version is not seen as changed twice.
        self._bumping = asyncio.Lock()
        # Held while the pause state changes (the engine call and the record of it together), so
        # that a pause and a resume that race leave the engine and the record in the state of
        # the one that ran last. The waits that follow a pause (an abort's, a drain's) run
        # outside it: a resume never waits for them.
        self._pause_state = asyncio.Lock()
        # A wait-mode pause's drain while it runs, cancelled by a resume.
        self._draining: Optional[asyncio.Future] = None
        # The contract's abort pause refuses new partial generations at once; SGLang's own
        # abort-mode pause holds them at its gate instead, as SGLang does.
        self._refusing = False
        self.weight_swap: Optional[WeightSwap] = None
        """The open weight swap (:mod:`engine_plugins.core.weight_swap`), set with the pause that
        begins it and cleared by the resume that ends it."""

    # --- abort -------------------------------------------------------------------------

    async def abort(
        self, request_ids: Optional[list[str]], wait: bool, timeout_s: Optional[float] = None, reason: Optional[str] = None
    ) -> AbortResult:
        """Abort *request_ids* exactly (None or empty: every accepted request); see the hookspec.

        *reason* (default: the reason of the abort hook call being answered) is recorded on the
        requests this call aborts, for their ``cancel_reason``.
        """
        reason = reason or _abort_reason.get()
        entries = self.registry.select(request_ids or None)
        newly_aborted = sum(1 for e in entries if not e.aborted)
        for entry in entries:
            if not entry.aborted:
                entry.aborted, entry.abort_reason = True, reason
        if entries:
            # Sent again for entries already aborted: harmless, and it re-covers a request
            # that slipped past an earlier abort on its way to the scheduler.
            await self.seam.abort(entries)
        timed_out = False
        if wait:
            # An abort of everything waits for the answers of requests released just before it
            # too (an engine's abort-mode pause may end them itself), so that on return every
            # client holds its answer.
            timeout = self.abort_timeout_s if timeout_s is None else timeout_s
            timed_out = not await self.registry.wait_released(entries, timeout, everything=not request_ids)
            if timed_out:
                _warn_stuck([e for e in entries if not e.released.is_set()], timeout)
        in_flight = len(self.registry)
        return AbortResult(aborted=newly_aborted, in_flight=in_flight, idle=in_flight == 0, timed_out=timed_out)

    async def select_by_age(self, admitted_before: Optional[str] = None, max_staleness: Optional[int] = None) -> list[str]:
        """The request ids of the requests admitted under a version older than *admitted_before*
        (its latest bump), or *max_staleness* or more bumps ago; for an abort by age.

        A version this server never had is a 400 naming it. Requests admitted later are never
        older, so the selection cannot miss one that arrives after it.
        """
        self._notice_version_change()
        if admitted_before is not None:
            generation = self.versions.generation_of(admitted_before)
            if generation is None:
                known = ", ".join(repr(n) for n in self.versions.recent_names())
                raise ContractError(
                    400, f"admitted_before: this server never had the weight version {admitted_before!r} (its latest: {known})"
                )
        elif max_staleness is not None:
            generation = self.versions.current - max_staleness + 1
        else:
            raise ValueError("select_by_age needs admitted_before or max_staleness")
        return list(dict.fromkeys(e.request_id for e in self.registry.admitted_before(generation)))

    async def nothing_aborted(self) -> AbortResult:
        """The answer of an abort that covered no request."""
        in_flight = len(self.registry)
        return AbortResult(aborted=0, in_flight=in_flight, idle=in_flight == 0)

    def in_flight_counts(self) -> InFlightCounts:
        """This process's accepted requests: how many, and how many per admitting version."""
        self._notice_version_change()
        by_version: dict[str, int] = {}
        age: dict[str, int] = {}
        for generation, count in self.registry.by_admission().items():
            name = self.versions.name_of(generation)
            by_version[name] = by_version.get(name, 0) + count
            age.setdefault(name, self.versions.staleness(generation))
        return InFlightCounts(in_flight=len(self.registry), by_version=by_version, age=age)

    # --- loads -------------------------------------------------------------------------

    async def loads(self, elsewhere: Sequence[InFlightCounts] = ()) -> LoadsResult:
        """Engine figures per rank, reconciled with the registry so the totals are exact.

        *elsewhere*: the requests the other front ends of this server hold (several API
        server processes share the engine), counted in as well.
        """
        counts = self.in_flight_counts()
        for other in elsewhere:
            counts = counts.plus(other)
        ranks = [dict(r) for r in await self.seam.rank_loads()] or [{"dp_rank": 0}]
        for rank in ranks:
            rank.setdefault("num_running_reqs", 0)
            rank.setdefault("num_waiting_reqs", 0)
        _reconcile(ranks, counts.in_flight)
        loads = []
        for rank in ranks:
            rank["num_total_reqs"] = rank["num_running_reqs"] + rank["num_waiting_reqs"]
            loads.append(RankLoad(**rank))
        aggregate = LoadsAggregate(
            total_running_reqs=sum(r.num_running_reqs for r in loads),
            total_waiting_reqs=sum(r.num_waiting_reqs for r in loads),
            total_reqs=sum(r.num_total_reqs for r in loads),
        )
        return LoadsResult(
            **self.seam.loads_header(),
            timestamp=datetime.now(timezone.utc).isoformat(),
            version=self.seam.engine_version() or "unknown",
            loads=loads,
            aggregate=aggregate,
            in_flight=counts.in_flight,
            paused=self.is_paused().is_paused,
            weight_version=self.seam.weight_version(),
            engine=self.seam.engine,
            in_flight_by_version=counts.by_version,
            weight_swap=self.open_weight_swap(),
        )

    # --- weight version ----------------------------------------------------------------

    async def update_weight_version(self, new_version: str, abort_all_requests: bool) -> UpdateWeightVersionResult:
        """Bump the version; abort everything first only when asked. Then the requests whose
        ``max_staleness`` this bump reaches are aborted (reason ``"stale"``), without waiting.

        A bump to the version in force is a no-op (no new generation, nothing aborted): a
        client's retry after a lost answer, or a trainer that sends the same version with every
        chunk of one weight swap, must not age every request by one more bump.

        The engine is set and the bump recorded together (the phases of a bump over several
        front ends, :meth:`record_bump` on each of the others, run in a row here)."""
        return await self._bump(new_version, abort_all_requests, self.seam.set_weight_version)

    async def record_bump(self, new_version: str) -> UpdateWeightVersionResult:
        """A bump another front end of the shared engine has set on it: record it in this
        front end's order of versions and its requests' spans, and abort its requests the bump
        makes too stale. A no-op where it is recorded already (a retry)."""

        async def learn(version: str) -> None:
            self.seam.note_weight_version(version)  # a SharedEngineSeam: no engine call

        return await self._bump(new_version, False, learn)

    async def _bump(self, new_version: str, abort_all_requests: bool,
                    set_version: Callable[[str], Awaitable[None]]) -> UpdateWeightVersionResult:
        """A bump, the engine's version set by *set_version* (the engine call, or the note of one
        made elsewhere)."""
        self._notice_version_change()
        async with self._bumping:
            if new_version == self.versions.current_name:
                return UpdateWeightVersionResult(
                    new_version=new_version, previous_version=new_version, message=f"already at {new_version}"
                )
            aborted = 0
            if abort_all_requests:
                aborted = (await self._abort_all("weight_version", self.abort_timeout_s)).aborted
            previous = self.seam.weight_version()
            await set_version(new_version)
            self.registry.admit_under(self.versions.bump(new_version), new_version)
            for rid, changes in self._version_changes.items():
                changes.append((len(self._latest[rid].output_ids), new_version))
            stale = self._over_staleness_limit()
        if stale:
            await self._dispatch_abort(stale, wait=False, timeout_s=self.abort_timeout_s, reason="stale")
        return UpdateWeightVersionResult(new_version=new_version, previous_version=previous, aborted=aborted)

    def _over_staleness_limit(self) -> list[str]:
        """Request ids of the requests not yet aborted whose ``max_staleness`` is reached."""
        return [
            e.request_id
            for e in self.registry.select()
            if e.max_staleness is not None and not e.aborted and self.versions.staleness(e.admitted) >= e.max_staleness
        ]

    def _notice_version_change(self) -> None:
        """Count a version set through the engine's own route (kept only with
        ``ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES=false``) as a bump, when it is first seen."""
        if self._bumping.locked():
            return  # a contract bump is changing it, and counts it itself
        name = self.seam.weight_version()
        if name != self.versions.current_name:
            self.registry.admit_under(self.versions.bump(name), name)

    # --- partial generation ------------------------------------------------------------

    async def partial_generate(
        self,
        input_ids: list[int],
        sampling_params: SamplingParams,
        request_id: Optional[str],
        max_staleness: Optional[int] = None,
    ) -> PartialGenerateResult:
        """Generate, returning every token and logprob even when aborted or paused mid-way.

        With *max_staleness*, the request is aborted (``cancel_reason: "stale"``) at the bump
        that makes it that many bumps old.
        """
        # Before anything else: an id outside the vocabulary would reach (and on SGLang kill) the engine.
        check_request(self.seam.model_limits(), input_ids, sampling_params)
        request_id = request_id or uuid.uuid4().hex
        self._notice_engine_pause()
        if self._refusing:
            return _cancelled_empty(request_id)
        if self.registry.has_request_id(request_id):
            raise ContractError(409, f"request_id {request_id!r} is already in flight", "conflict")
        self._notice_version_change()
        rid = new_rid()
        entry = self.registry.add(rid, request_id)
        entry.max_staleness = max_staleness
        latest = Generation()
        self._latest[rid] = latest
        self._version_changes[rid] = [(0, self.seam.weight_version())]
        try:
            async for latest in self.seam.generate(rid, input_ids, sampling_params):
                self._latest[rid] = latest
        finally:
            self.registry.release(rid)
            del self._latest[rid]
            changes = self._version_changes.pop(rid)
        # A stream that ended without a finish reason was cut off: report it as aborted.
        finish = latest.finish_reason or "abort"
        if finish == "abort" and len(latest.output_ids) >= sampling_params.max_new_tokens:
            # The abort raced the last token (seen on SGLang): nothing is missing, so it is done.
            finish = "length"
        return PartialGenerateResult(
            request_id=request_id,
            output_ids=latest.output_ids,
            output_logprobs=latest.output_logprobs,
            finish_reason=finish,
            cancelled=finish == "abort",
            weight_versions=_spans(latest, changes),
            cancel_reason=self._cancel_reason(entry) if finish == "abort" else None,
            cached_tokens=latest.cached_tokens,
        )

    def _cancel_reason(self, entry: InFlight) -> Optional[str]:
        """Why a generation was cut: the reason of the abort that covered it; an abort without
        one (the engine's own abort route) is ``"abort"``; else a pause in ``abort`` mode (an
        engine may cut its requests itself when pausing); else unknown."""
        if entry.abort_reason is not None:
            return _CANCEL_REASONS.get(entry.abort_reason, entry.abort_reason)
        if entry.aborted:
            return "abort"
        return "pause" if self.pause_mode == "abort" else None

    # --- pause -------------------------------------------------------------------------

    async def pause(self, mode: str, timeout_s: Optional[float] = None, clear_cache: Optional[bool] = None,
                    weight_swap: Optional[WeightSwap] = None) -> PauseState:
        """Pause in ``abort``, ``keep`` or ``wait`` mode; see the hookspec.

        ``wait`` is a drain: the seam stops admitting new requests (they wait until resume, and
        are counted) and names the requests already admitted; the call returns once those are
        released, or after *timeout_s*, or when a resume ends the pause first. *clear_cache* is
        passed to the engine (vLLM's). *weight_swap*: the swap this pause begins, recorded with it.

        The three phases of a pause over several front ends, in a row: :meth:`enter_pause`,
        :meth:`pause_engine`, :meth:`finish_pause`.
        """
        timeout = self.abort_timeout_s if timeout_s is None else timeout_s
        async with self._pause_state:
            before = self.enter_pause(mode, weight_swap)
            try:
                await self._pause_engine(mode, timeout, clear_cache)
            except BaseException:
                # The engine refused (vLLM under a prepared checkpoint): the contract is as it
                # was, so that /is_paused, the gate and a later pause tell the truth.
                self.pause_mode, self._refusing, self.weight_swap = before
                raise
        return await self.finish_pause(mode, timeout)

    def enter_pause(self, mode: str, weight_swap: Optional[WeightSwap] = None,
                    engine_elsewhere: bool = False) -> tuple:
        """A pause's first phase: take *mode* (in ``abort`` mode new partial generations are
        refused from now on, and requests the engine cuts are cut by the pause) and record
        *weight_swap*. *engine_elsewhere*: another front end of the shared engine pauses it (this
        one's seam is a SharedEngineSeam). Returns the state before, for an undo."""
        if weight_swap is not None:
            self.refuse_second_swap(weight_swap)
        before = (self.pause_mode, self._refusing, self.weight_swap)
        if weight_swap is not None:
            self.weight_swap = weight_swap
        self.pause_mode, self._refusing = mode, mode == "abort"
        if engine_elsewhere:
            self.seam.note_pause(True)
        return before

    async def pause_engine(self, mode: str, timeout_s: float, clear_cache: Optional[bool]) -> None:
        """A pause's second phase, made once for the engine: pause it (``wait``: start its drain,
        and this front end's share of it, which :meth:`finish_pause` waits for). Nothing, when a
        resume has ended the pause since :meth:`enter_pause`."""
        async with self._pause_state:
            if self.pause_mode == mode:
                await self._pause_engine(mode, timeout_s, clear_cache)

    async def _pause_engine(self, mode: str, timeout_s: float, clear_cache: Optional[bool]) -> None:
        if mode == "wait":
            self._draining = asyncio.ensure_future(self._drain(lambda: self.seam.drain(clear_cache), timeout_s))
        else:
            await self.seam.pause(mode, clear_cache)

    async def finish_pause(self, mode: str, timeout_s: float, engine_elsewhere: bool = False) -> PauseState:
        """A pause's third phase, on each front end: ``abort`` aborts this front end's requests,
        ``wait`` waits for its admitted ones (ended early by a resume), within *timeout_s*;
        ``keep`` has nothing to do. *engine_elsewhere*: another front end paused the engine."""
        if mode == "wait":
            async with self._pause_state:
                if engine_elsewhere and self.pause_mode == "wait" and (self._draining is None or self._draining.done()):
                    self._draining = asyncio.ensure_future(self._drain(self.seam.drain_share, timeout_s))
                drain = self._draining
            if drain is None:
                return self.is_paused()  # a resume came first
            try:
                await asyncio.shield(drain)
            except asyncio.CancelledError:
                if not drain.cancelled():
                    drain.cancel()  # this caller was cancelled, not the drain by a resume
                    raise
            # A resume that ended the drain may still be telling the engine: answer once it is done.
            async with self._pause_state:
                return self.is_paused()
        if mode == "abort":
            await self._abort_all("pause", timeout_s)
        return self.is_paused()

    async def hold(self, mode: str, engine_pause: Callable[[], Awaitable[None]]) -> PauseState:
        """Pause through an engine's own route (SGLang's ``/pause_generation``): *engine_pause*
        runs under the same lock as the contract's pause and resume, and the pause is recorded
        as *mode*, so that ``/is_paused``, ``/v1/loads`` and a later resume know of it."""
        async with self._pause_state:
            self.pause_mode, self._refusing = mode, False
            await engine_pause()
        return self.is_paused()

    async def _drain(self, admitted: Callable[[], Awaitable[Sequence[InFlight]]], timeout_s: float) -> bool:
        """Wait for the engine's drain (or this front end's share of one), which names the
        admitted requests, then for those; False if *timeout_s* ran out."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        try:
            named = await asyncio.wait_for(admitted(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return await self.registry.wait_released(named, max(0.0, end - loop.time()))

    async def resume(self) -> PauseState:
        """Resume, ending a drain under way; the engine is always told, so that a pause made
        behind the contract's back (or one whose record was lost) is ended too. Over several
        front ends, this is the resume of the front end that tells the engine; each of the
        others then :meth:`leave_pause`."""
        async with self._pause_state:
            await self._end_drain()
            await self.seam.resume()
            self.pause_mode, self._refusing, self.weight_swap = None, False, None
        return self.is_paused()

    async def leave_pause(self) -> PauseState:
        """A resume made on the shared engine through another front end: end this front end's
        drain, and its pause."""
        async with self._pause_state:
            await self._end_drain()
            self.seam.note_pause(False)  # a SharedEngineSeam
            self.pause_mode, self._refusing, self.weight_swap = None, False, None
        return self.is_paused()

    async def _end_drain(self) -> None:
        """Cancel a wait pause's drain under way (under the pause-state lock)."""
        drain, self._draining = self._draining, None
        if drain is not None and not drain.done():
            # Its engine call may be on its way: it must land before the resume, not after.
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain

    def is_paused(self) -> PauseState:
        """The pause state: the engine's own where it can tell (a pause through its own routes,
        or one ended behind the contract's back), else the one set through the contract."""
        self._notice_engine_pause()
        mode = self.pause_mode
        if mode is None:
            engine = self.seam.engine_pause()
            mode = engine.mode if engine is not None and engine.paused else None
        return PauseState(is_paused=mode is not None, mode=mode, weight_swap=self.open_weight_swap())

    def refuse_second_swap(self, swap: WeightSwap) -> None:
        """A 409 when a swap other than *swap* is open and its lease has not run out: one swap at
        a time (checked where the pause that begins *swap* holds the pause state)."""
        current = self.open_weight_swap()
        if current is not None and not current.expired and current.swap_id != swap.swap_id:
            raise ContractError(
                409,
                f"weight swap {current.swap_id} to {current.version!r} is open (its lease runs out in "
                f"{current.lease_expires_at - time.time():.0f} s): commit it first",
                "conflict",
            )

    def open_weight_swap(self) -> Optional[WeightSwap]:
        """The open weight swap, ``expired`` once its lease has run out; None when there is none."""
        swap = self.weight_swap
        if swap is None:
            return None
        return swap.model_copy(update={"expired": time.time() > swap.lease_expires_at})

    def _notice_engine_pause(self) -> None:
        """Forget a pause that the engine says has ended (resumed through its own route), unless
        a pause or resume is changing the state right now."""
        if self.pause_mode is None or self._pause_state.locked():
            return
        engine = self.seam.engine_pause()
        if engine is not None and not engine.paused:
            self.pause_mode, self._refusing = None, False

    def weight_version(self) -> str:
        """The weight version new tokens are generated with."""
        return self.seam.weight_version()

    async def _abort_all(self, reason: str, timeout_s: float) -> AbortResult:
        """Abort every request and wait, through :attr:`dispatch_abort` when it is set."""
        return await self._dispatch_abort(None, wait=True, timeout_s=timeout_s, reason=reason)

    async def _dispatch_abort(self, request_ids: Optional[list[str]], wait: bool, timeout_s: float, reason: str) -> AbortResult:
        """The control's own abort, through :attr:`dispatch_abort` when it is set."""
        if self.dispatch_abort is None:
            return await self.abort(request_ids, wait=wait, timeout_s=timeout_s, reason=reason)
        return await self.dispatch_abort(request_ids=request_ids, wait=wait, timeout_s=timeout_s, reason=reason)


def _warn_stuck(stuck: list[InFlight], timeout_s: float) -> None:
    """Say which requests an abort with wait left in flight, and in what state: the answer says
    only how many, and an operator (or a failing test) needs to know which and why."""
    named = ", ".join(
        f"{e.request_id} (engine id {e.rid}, {'dispatched' if e.dispatched else 'held before the scheduler'}, "
        f"aborted {'by ' + str(e.abort_reason) if e.aborted else 'never'}, admitted under {e.admitted_version!r})"
        for e in stuck[:STUCK_NAMED]
    )
    more = f" and {len(stuck) - STUCK_NAMED} more" if len(stuck) > STUCK_NAMED else ""
    logger.warning("engine_plugins: an abort with wait timed out after %.1f s with %d of its requests in flight: %s%s",
                   timeout_s, len(stuck), named, more)


def _cancelled_empty(request_id: str) -> PartialGenerateResult:
    return PartialGenerateResult(
        request_id=request_id,
        output_ids=[],
        output_logprobs=[],
        finish_reason="abort",
        cancelled=True,
        weight_versions=[],
        cancel_reason="pause",
    )


def _reconcile(ranks: list[dict], in_flight: int) -> None:
    """Make the ranks' totals equal the registry's count of accepted requests.

    Requests the scheduler has not seen (tokenizing, held at a pause gate) count as waiting on
    the first rank; figures the engine still shows for released requests (a snapshot frozen
    while paused) are taken off, waiting first.
    """
    missing = in_flight - sum(r["num_running_reqs"] + r["num_waiting_reqs"] for r in ranks)
    if missing > 0:
        ranks[0]["num_waiting_reqs"] += missing
        return
    for key in ("num_waiting_reqs", "num_running_reqs"):
        for rank in ranks:
            take = min(-missing, rank[key])
            rank[key] -= take
            missing += take


def _spans(latest: Generation, changes: list[tuple[int, str]]) -> list[WeightVersionSpan]:
    """The engine's spans when they cover the output exactly; otherwise the ones seen here."""
    n = len(latest.output_ids)
    # Empty spans say nothing (SGLang reports one for a request aborted before its first token).
    engine_spans = [s for s in latest.weight_versions if s.end > s.start]
    if engine_spans and engine_spans[0].start == 0 and engine_spans[-1].end == n:
        return engine_spans
    spans: list[WeightVersionSpan] = []
    for i, (start, version) in enumerate(changes):
        end = changes[i + 1][0] if i + 1 < len(changes) else n
        start, end = min(start, n), min(end, n)
        if end <= start:
            continue
        if spans and spans[-1].version == version:
            spans[-1].end = end
        else:
            spans.append(WeightVersionSpan(version=version, start=start, end=end))
    return spans
