"""The contract over every API server process of one server, from whichever process a call reaches.

With several API processes (vLLM's ``--api-server-count N``) each process has its own front end
and registry, while the engine core behind them (pause, weight version, the scheduler's counts)
is shared. :class:`ServerControl` stands where the engine's :class:`~.control.RolloutControl`
stands and passes every operation that must cover the whole server to the other processes
(:mod:`engine_plugins.fanout.peers`), which run it on their own requests, then merges the answers:

- abort (all, by id, with wait) and the age selection cover every process's requests, the ones
  not yet in the engine core included (each process's own fence); counts are summed;
- loads count every process's requests against the engine's per-rank figures;
- pause, resume and version bumps run in phases: the engine core, shared, is called once, by
  the process that spreads the operation, and every process takes its own share around that
  call (see :meth:`ServerControl.pause`, :meth:`ServerControl.resume`,
  :meth:`ServerControl.update_weight_version`), so that each one refuses, holds, cuts and
  attributes its own requests alike.

A partial generation runs on the process that got it; its ``request_id`` is checked against
the other processes' requests while it starts, so a duplicate is refused wherever the first one
runs. Operations run on a peer's behalf are local there (:func:`local_only`), so nothing is
passed on twice.

A process that fails its share (stopped, stalled, or its operation raised) makes the call a 503
naming it and saying where the call applied. A pause is undone where it applied (the server was
not paused before), so that every process and ``GET /is_paused`` agree; a bump is not undone (it
cannot be without counting another), and since a bump to the version in force is a no-op, the
retry the 503 asks for records it where it was missed and nowhere twice. A resume is safe to repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from typing import Any, Awaitable, Iterable, Iterator, Optional

from engine_plugins.core.control import InFlightCounts, RolloutControl
from engine_plugins.contract.errors import ContractError
from engine_plugins.fanout.peers import PeerError, Peers
from engine_plugins.contract.schema import (
    AbortResult,
    LoadsResult,
    PartialGenerateResult,
    PauseState,
    SamplingParams,
    UpdateWeightVersionResult,
    WeightSwap,
)

# Set while an operation runs for this process alone (on a peer's behalf, or this process's own
# share of a call it passes on).
_local_only: contextvars.ContextVar[bool] = contextvars.ContextVar("engine_plugins_local_only", default=False)

# Time limit of the calls that do not carry one of their own (loads, resume, a bump).
QUICK_S = 10.0
# The API process that keeps the server's pause state: every pause and resume is spread by it.
PAUSE_OWNER = 0


@contextlib.contextmanager
def local_only() -> Iterator[None]:
    """Within this block, :class:`ServerControl` operations cover this process only."""
    token = _local_only.set(True)
    try:
        yield
    finally:
        _local_only.reset(token)


class ServerControl:
    """A :class:`~engine_plugins.contract.control.Control` for a whole server of several API processes.

    Operations over the whole server go to every process; what it does not pass on (the
    registry, the seam, the pause state each process keeps in step) is the local control's,
    read through the properties below.
    """

    def __init__(self, local: RolloutControl, peers: Peers) -> None:
        self.local = local
        self.peers = peers
        # On the owner of the server's pause state (API process 0): held while a pause or a
        # resume is spread, so that two of them, sent to any processes, apply one after the
        # other on every process and the engine core ends in the state of the last one.
        self._pause_state = asyncio.Lock()
        self._draining = False  # a wait pause is spread: a resume ends it without waiting for it

    # --- what stays this process's own (the Control protocol's and the host's reads) ----------

    @property
    def registry(self) -> Any:
        """This process's in-flight registry."""
        return self.local.registry

    @property
    def seam(self) -> Any:
        """This process's seam over the engine."""
        return self.local.seam

    @property
    def versions(self) -> Any:
        """The order of weight versions, which every process keeps in step."""
        return self.local.versions

    @property
    def pause_mode(self) -> Optional[str]:
        """The contract's pause mode, which every process keeps in step."""
        return self.local.pause_mode

    def is_paused(self) -> PauseState:
        """The pause state, kept in step on every process."""
        return self.local.is_paused()

    def open_weight_swap(self) -> Optional[WeightSwap]:
        """The open weight swap, kept in step on every process."""
        return self.local.open_weight_swap()

    def weight_version(self) -> str:
        """The weight version new tokens are generated with (the engine core's, shared)."""
        return self.local.weight_version()

    def refuse_second_swap(self, swap: WeightSwap) -> None:
        """A 409 when another weight swap is open (see the local control)."""
        self.local.refuse_second_swap(swap)

    @property
    def dispatch_abort(self) -> Any:
        """The local control's abort dispatch (the plugin stack sets it to the abort hook)."""
        return self.local.dispatch_abort

    @dispatch_abort.setter
    def dispatch_abort(self, value: Any) -> None:
        self.local.dispatch_abort = value

    @property
    def dispatch_bump(self) -> Any:
        """The local control's bump dispatch (the plugin stack sets it to the bump hook, with this control)."""
        return self.local.dispatch_bump

    @dispatch_bump.setter
    def dispatch_bump(self, value: Any) -> None:
        self.local.dispatch_bump = value

    async def serve_peers(self) -> None:
        """Answer the other processes' calls with this process's share of each operation."""
        await self.peers.listen({
            "abort": self._peer_abort,
            "select_by_age": self._peer_select_by_age,
            "counts": self._peer_counts,
            "has_request_id": self._peer_has_request_id,
            "record_bump": self._peer_record_bump,
            "enter_pause": self._peer_enter_pause,
            "finish_pause": self._peer_finish_pause,
            "leave_pause": self._peer_leave_pause,
            "server_pause": self._peer_server_pause,
            "server_resume": self._peer_server_resume,
        })

    # --- operations over the whole server -------------------------------------------------

    async def abort(
        self, request_ids: Optional[list[str]], wait: bool, timeout_s: Optional[float] = None, reason: Optional[str] = None
    ) -> AbortResult:
        """Abort on every process at once; the counts are the server's."""
        if _local_only.get():
            return await self.local.abort(request_ids, wait, timeout_s, reason)
        timeout = self.local.abort_timeout_s if timeout_s is None else timeout_s
        spread = await self._each(
            "abort", timeout, self.local.abort(request_ids, wait, timeout, reason),
            request_ids=request_ids, wait=wait, timeout_s=timeout, reason=reason,
        )
        results = [spread.done[self.peers.index] if i == self.peers.index else AbortResult.model_validate(r)
                   for i, r in sorted(spread.done.items())]
        if spread.failed:
            # An abort cannot be undone; say where it happened.
            raise self._unavailable(spread, f"aborted on {_processes(spread.done)} ({sum(r.aborted for r in results)} requests)")
        in_flight = sum(r.in_flight for r in results)
        return AbortResult(
            aborted=sum(r.aborted for r in results), in_flight=in_flight, idle=in_flight == 0,
            timed_out=any(r.timed_out for r in results),
        )

    async def select_by_age(self, admitted_before: Optional[str] = None, max_staleness: Optional[int] = None) -> list[str]:
        """The ids of every process's requests older than the selector."""
        mine = await self.local.select_by_age(admitted_before, max_staleness)
        if _local_only.get():
            return mine
        theirs = await self._everywhere("select_by_age", QUICK_S, admitted_before=admitted_before, max_staleness=max_staleness)
        return list(dict.fromkeys([*mine, *(rid for ids in theirs for rid in ids)]))

    async def nothing_aborted(self) -> AbortResult:
        """The answer of an abort that covered no request, with the server's in-flight count."""
        in_flight = sum(c.in_flight for c in await self._all_counts())
        return AbortResult(aborted=0, in_flight=in_flight, idle=in_flight == 0)

    async def loads(self) -> LoadsResult:
        """The engine's per-rank figures reconciled with every process's requests."""
        if _local_only.get():
            return await self.local.loads()
        theirs = await self._everywhere("counts", QUICK_S)
        return await self.local.loads([InFlightCounts(**c) for c in theirs])

    async def update_weight_version(self, new_version: str, abort_all_requests: bool) -> UpdateWeightVersionResult:
        """Abort everywhere first when asked, then bump in two phases: this process sets the
        version on the shared engine core once and records the bump, then every other process
        records it (its own order of versions, its requests' spans and staleness fence).

        A bump to the version in force is a no-op on each process that has it, so a retry after
        a 503 records the bump only where it was missed; the abort is skipped when this process
        has the version already (it is a retry, or a repeat of the bump)."""
        if _local_only.get():
            return await self.local.update_weight_version(new_version, abort_all_requests)
        aborted = 0
        if abort_all_requests and self.local.weight_version() != new_version:
            dispatch = self.local.dispatch_abort or self.abort
            aborted = (await dispatch(request_ids=None, wait=True, timeout_s=self.local.abort_timeout_s, reason="weight_version")).aborted
        spread = Spread("update_weight_version", self.peers.index, self.peers.count)
        try:
            with local_only():
                spread.done[self.peers.index] = await self.local.update_weight_version(new_version, False)
        except Exception as exc:
            spread.failed[self.peers.index] = exc
            first = f"aborted {aborted} requests; " if aborted else ""
            raise self._unavailable(spread, f"{first}the version was not set: no process is at {new_version!r} by this call")
        spread.merge(await self._each("record_bump", QUICK_S, None, new_version=new_version))
        if spread.failed:
            first = f"aborted {aborted} requests, then " if aborted else ""
            raise self._unavailable(spread, f"{first}at {new_version!r} now: {_processes(spread.done)}; a retry bumps only "
                                            f"the processes not yet at {new_version!r}")
        mine: UpdateWeightVersionResult = spread.done[self.peers.index]
        bumped = [i for i, r in spread.done.items() if i != self.peers.index and r["previous_version"] != new_version]
        update: dict[str, Any] = {"aborted": aborted}
        if mine.previous_version == new_version and bumped:
            update["message"] = f"Weight version updated to {new_version} on {_processes(bumped)}; the others were at it already"
        return mine.model_copy(update=update)

    async def partial_generate(
        self, input_ids: list[int], sampling_params: SamplingParams, request_id: Optional[str], max_staleness: Optional[int] = None
    ) -> PartialGenerateResult:
        """Generate here; a *request_id* another process has in flight is a 409, as it is here.

        The other processes are asked while the generation starts, so the check adds no wait
        of its own; a generation whose id turns out taken is aborted before it answers.
        """
        start = self.local.partial_generate(input_ids, sampling_params, request_id, max_staleness)
        if _local_only.get() or request_id is None:
            return await start
        generation = asyncio.ensure_future(start)
        try:
            taken = any(await self._everywhere("has_request_id", QUICK_S, request_id=request_id))
        except BaseException:
            generation.cancel()
            raise
        if taken:
            generation.cancel()
            with contextlib.suppress(asyncio.CancelledError, ContractError):
                await generation
            raise ContractError(409, f"request_id {request_id!r} is already in flight", "conflict")
        return await generation

    async def pause(self, mode: str, timeout_s: Optional[float] = None, clear_cache: Optional[bool] = None,
                    weight_swap: Optional[WeightSwap] = None) -> PauseState:
        """Pause the server in three phases (see :meth:`_spread_pause`): every process enters
        the pause, the engine core is paused once, then every process aborts, holds or drains
        its own requests; where one fails, the pause is undone on the others (see
        :meth:`_failed_pause`). Made by the owner of the pause state, whichever process the call
        reached."""
        if _local_only.get():
            return await self.local.pause(mode, timeout_s, clear_cache, weight_swap)
        timeout = self.local.abort_timeout_s if timeout_s is None else timeout_s
        if not self._owns_pause_state():
            answer = await self._at_owner("server_pause", timeout + 2 * QUICK_S, mode=mode, timeout_s=timeout,
                                          clear_cache=clear_cache, weight_swap=_dumped(weight_swap))
            if answer is not None:
                return PauseState.model_validate(answer)
            return await self._spread_pause(mode, timeout, clear_cache, weight_swap)
        async with self._pause_state:
            if weight_swap is not None:
                # Before any process records it: a refusal on one would undo the open swap's pause on all.
                self.local.refuse_second_swap(weight_swap)
            self._draining = mode == "wait"
            try:
                return await self._spread_pause(mode, timeout, clear_cache, weight_swap)
            finally:
                self._draining = False

    async def _spread_pause(self, mode: str, timeout: float, clear_cache: Optional[bool],
                            weight_swap: Optional[WeightSwap] = None) -> PauseState:
        """The pause's phases (see :meth:`pause`):

        1. every process enters it: takes the mode (in ``abort`` mode it refuses new generations
           from now on, and names the pause as the cancel reason of what the engine cuts) and
           records *weight_swap*; all of them, before the engine core (shared) cuts anyone's
           requests;
        2. this process pauses the engine core, once (``wait``: and waits for its drain, which
           ends once the engine core runs nothing, and for its own requests);
        3. every process finishes its share within *timeout*: aborts (``abort``) or waits for
           (``wait``) its own requests.
        """
        was_paused = self.local.pause_mode is not None
        swap = _dumped(weight_swap)
        spread = await self._each("enter_pause", QUICK_S, _call(self.local.enter_pause, mode, weight_swap),
                                  mode=mode, weight_swap=swap)
        if spread.failed:
            await self._failed_pause(spread, was_paused, f"in {mode} mode")
        engine = Spread("pause", self.peers.index, self.peers.count, done={i: None for i in spread.done})
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        try:
            await self.local.pause_engine(mode, timeout, clear_cache)
            # The engine's drain ends once the engine core runs nothing: this process's share
            # with it, then the others' is only reading their last answers.
            drained = await self.local.finish_pause(mode, timeout) if mode == "wait" else None
        except Exception as exc:
            del engine.done[self.peers.index]
            engine.failed[self.peers.index] = exc
            await self._failed_pause(engine, was_paused, f"in {mode} mode, the engine not paused")
        if mode == "wait":
            left_s = max(0.0, end - loop.time())
            spread = await self._each("finish_pause", left_s, _done(drained), mode=mode, timeout_s=left_s)
        else:
            spread = await self._each("finish_pause", timeout, self.local.finish_pause(mode, timeout), mode=mode, timeout_s=timeout)
        if spread.failed:
            # A process that took the pause and then gave no answer keeps it until a resume
            # reaches it: say so, since /is_paused there says so too.
            left = ("in abort mode (refusing new generations) until a resume reaches it" if mode == "abort"
                    else f"in {mode} mode until a resume reaches it")
            await self._failed_pause(spread, was_paused, "paused", left)
        return spread.done[self.peers.index]

    async def _failed_pause(self, spread: "Spread", was_paused: bool, did: str, left: str = "") -> None:
        """Undo a pause that failed on some process, where it may have applied: resume the engine
        and those that answered (an error too: it may have applied in part); a process that gave
        no answer starts no call late, so it is left as it was (*left*: how that is). Always raises."""
        local = spread.failed.get(self.peers.index)
        if was_paused:
            # The processes were paused before: resuming them would be no undo.
            raise self._unavailable(spread, f"{did}: {_processes(spread.done)}; nothing undone, since the server was "
                                            "paused before this call (pause again, or resume)")
        silent = sorted(i for i, e in spread.failed.items() if isinstance(e, PeerError) and not e.answered)
        where = sorted((set(spread.done) | set(spread.failed)) - set(silent))
        undo = await self._resume_at(where)
        outcome = f"{did}, then resumed: {_processes(undo.done)}"
        if undo.failed:
            outcome += f"; not resumed: {undo.failures()}"
        if silent:
            left = left or "as it was (a process runs no call that reaches it too late), unless it stalled mid-call"
            outcome += f"; left {left}: {_processes(silent)}"
        if isinstance(local, ContractError) and local.status < 500 and len(spread.failed) == 1:
            raise local
        raise self._unavailable(spread, outcome)

    async def resume(self) -> PauseState:
        """Resume the server: the engine core once, here, then every other process leaves the
        pause (see :meth:`_resume_at`); a process that fails stays paused, and a resume is safe
        to repeat. Made by the owner of the pause state, after a pause it is spreading (a wait
        pause's drain excepted: the resume ends it)."""
        if _local_only.get():
            return await self.local.resume()
        if not self._owns_pause_state():
            answer = await self._at_owner("server_resume", 2 * QUICK_S)
            return PauseState.model_validate(answer) if answer is not None else await self._spread_resume()
        if self._draining:
            return await self._spread_resume()
        async with self._pause_state:
            return await self._spread_resume()

    def _owns_pause_state(self) -> bool:
        """Whether this process is the one that spreads every pause and resume of the server."""
        return self.peers.index == PAUSE_OWNER

    async def _at_owner(self, op: str, limit_s: float, /, **args: Any) -> Optional[dict]:
        """*op* made by the owner of the pause state; None when the owner is not serving (this
        process then makes it itself)."""
        answers = await self.peers.call_some([PAUSE_OWNER], op, limit_s, **args)
        if PAUSE_OWNER not in answers:
            return None
        answer = answers[PAUSE_OWNER]
        if isinstance(answer, PeerError):
            raise ContractError(503, f"{answer} (the pause state of this server is kept by API process {PAUSE_OWNER})", "unavailable")
        if "refused" in answer:
            # The owner's own answer to the client: the same status and message as if it had been sent there.
            raise ContractError(**answer["refused"])
        return answer

    async def _spread_resume(self) -> PauseState:
        """The resume's phases on every process (see :meth:`resume`)."""
        spread = await self._resume_at(None)
        if self.peers.index in spread.failed:
            raise self._unavailable(spread, "the engine was not resumed: every process is still paused (a resume is safe to repeat)")
        if spread.failed:
            raise self._unavailable(spread, f"resumed: {_processes(spread.done)}; the others may still be paused (a resume is safe to repeat)")
        return spread.done[self.peers.index]

    async def _resume_at(self, where: Optional[Iterable[int]]) -> "Spread":
        """A resume's two phases: this process resumes the engine core, once, with its own
        share (ending its drain first); then the other processes of *where* (None: every one)
        leave the pause. Not before: a process that takes new requests while the engine is
        still paused would see them refused as by a pause that is not the contract's. Where
        the engine does not resume, the others are left paused with it."""
        spread = Spread("resume", self.peers.index, self.peers.count)
        try:
            with local_only():
                spread.done[self.peers.index] = await self.local.resume()
        except Exception as exc:
            spread.failed[self.peers.index] = exc
            return spread
        spread.merge(await self._each("leave_pause", QUICK_S, None, to=where))
        return spread

    # --- this process's share, for the others ---------------------------------------------

    async def _peer_abort(self, **kwargs: Any) -> dict:
        with local_only():
            return (await self._dispatch_local_abort(**kwargs)).model_dump()

    async def _dispatch_local_abort(self, **kwargs: Any) -> AbortResult:
        # Through the abort hook when the stack has set it, so that this process's plugins
        # see the aborts of its own requests.
        dispatch = self.local.dispatch_abort
        if dispatch is None:
            return await self.local.abort(**kwargs)
        return await dispatch(**kwargs)

    async def _peer_select_by_age(self, admitted_before: Optional[str], max_staleness: Optional[int]) -> list[str]:
        try:
            return await self.local.select_by_age(admitted_before, max_staleness)
        except ContractError:
            return []  # a version this process never had: it holds nothing older than it

    async def _peer_counts(self) -> dict:
        return dataclasses.asdict(self.local.in_flight_counts())

    async def _peer_has_request_id(self, request_id: str) -> bool:
        return self.local.registry.has_request_id(request_id)

    async def _peer_record_bump(self, new_version: str) -> dict:
        with local_only():
            return (await self.local.record_bump(new_version)).model_dump()

    async def _peer_enter_pause(self, mode: str, weight_swap: Optional[dict] = None) -> None:
        self.local.enter_pause(mode, _swap(weight_swap), engine_elsewhere=True)

    async def _peer_finish_pause(self, mode: str, timeout_s: float) -> dict:
        with local_only():
            return (await self.local.finish_pause(mode, timeout_s, engine_elsewhere=True)).model_dump()

    async def _peer_leave_pause(self) -> dict:
        return (await self.local.leave_pause()).model_dump()

    async def _peer_server_pause(self, mode: str, timeout_s: float, clear_cache: Optional[bool],
                                 weight_swap: Optional[dict] = None) -> dict:
        return await _as_answer(self.pause(mode, timeout_s, clear_cache, _swap(weight_swap)))

    async def _peer_server_resume(self) -> dict:
        return await _as_answer(self.resume())

    # --- helpers ----------------------------------------------------------------------------

    async def _all_counts(self) -> list[InFlightCounts]:
        theirs = [] if _local_only.get() else await self._everywhere("counts", QUICK_S)
        return [self.local.in_flight_counts(), *(InFlightCounts(**c) for c in theirs)]

    async def _everywhere(self, op: str, limit_s: float, /, **args: Any) -> list[Any]:
        """The answers of every other process to *op* (one that changes nothing), within its
        time limit *limit_s*; a process that fails makes it a 503 naming it."""
        spread = await self._each(op, limit_s, None, **args)
        if spread.failed:
            raise self._unavailable(spread, "nothing was changed")
        return [spread.done[i] for i in sorted(spread.done)]

    async def _each(self, op: str, limit_s: float, mine: Optional[Awaitable[Any]], /, *,
                    to: Optional[Iterable[int]] = None, **args: Any) -> "Spread":
        """*op* with *args* on the other processes (or those of *to*), and *mine* (this
        process's share, None: none) at the same time, for this process alone."""
        others = [i for i in (self.peers.others() if to is None else to) if i != self.peers.index]
        with local_only():
            local, theirs = await asyncio.gather(
                mine if mine is not None else _done(_ABSENT), self.peers.call_some(others, op, limit_s, **args),
                return_exceptions=True,
            )
        for outcome in (theirs, local):
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome  # cancelled: the caller is gone
        if isinstance(theirs, BaseException):
            raise theirs
        spread = Spread(op, self.peers.index, self.peers.count)
        for i, answer in {**theirs, self.peers.index: local}.items():
            if answer is _ABSENT:
                continue
            if isinstance(answer, BaseException):
                spread.failed[i] = answer
            else:
                spread.done[i] = answer
        return spread

    def _unavailable(self, spread: "Spread", outcome: str) -> ContractError:
        """The 503 for *spread*'s failures, with what the call did where it applied."""
        return ContractError(503, f"{spread.failures()}; {outcome}", "unavailable")


@dataclasses.dataclass
class Spread:
    """What one operation did on each process: the answers and the failures, by index."""

    op: str
    index: int
    count: int
    done: dict[int, Any] = dataclasses.field(default_factory=dict)
    failed: dict[int, BaseException] = dataclasses.field(default_factory=dict)

    def merge(self, other: "Spread") -> None:
        """Take in *other*'s answers and failures (another phase of the same operation)."""
        self.done.update(other.done)
        self.failed.update(other.failed)

    def failures(self) -> str:
        """Each failure, naming its process."""
        lines = []
        for i in sorted(self.failed):
            error = self.failed[i]
            if isinstance(error, PeerError):
                lines.append(str(error))
            else:
                message = error.message if isinstance(error, ContractError) else f"{type(error).__name__}: {error}"
                lines.append(f"API process {i} of {self.count} (this one) failed {self.op!r}: {message}")
        return "; ".join(lines)


_ABSENT = object()


async def _as_answer(operation: Awaitable[PauseState]) -> dict:
    """A pause state as a peer answer, or the contract error that refused it as
    ``{"refused": {...}}``, so that the process the client reached answers it unchanged."""
    try:
        return (await operation).model_dump()
    except ContractError as exc:
        return {"refused": {"status": exc.status, "message": exc.message, "type_": exc.type}}


def _dumped(swap: Optional[WeightSwap]) -> Optional[dict]:
    """A weight swap's record as it is sent to a peer."""
    return swap.model_dump() if swap is not None else None


def _swap(record: Optional[dict]) -> Optional[WeightSwap]:
    """A weight swap's record as a peer received it."""
    return WeightSwap.model_validate(record) if record is not None else None


async def _done(value: Any) -> Any:
    """*value*, as an awaitable (a share already done)."""
    return value


async def _call(share: Any, *args: Any) -> Any:
    """*share* (a plain function) called with *args*, as an awaitable: it runs when awaited,
    among the other processes' calls, and what it raises is its failure."""
    return share(*args)


def _processes(indexes: Iterable[int]) -> str:
    """``process 1``, ``processes 0, 2`` or ``no process``."""
    ordered = sorted(indexes)
    if not ordered:
        return "no process"
    return ("process " if len(ordered) == 1 else "processes ") + ", ".join(map(str, ordered))
