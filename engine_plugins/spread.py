"""The contract over every API server process of one server, from whichever process a call reaches.

With several API processes (vLLM's ``--api-server-count N``) each process has its own front end
and registry, while the engine core behind them (pause, weight version, the scheduler's counts)
is shared. :class:`ServerControl` stands where the engine's :class:`~.control.RolloutControl`
stands and passes every operation that must cover the whole server to the other processes
(:mod:`engine_plugins.peers`), which run it on their own requests, then merges the answers:

- abort (all, by id, with wait) and the age selection cover every process's requests, the ones
  not yet in the engine core included (each process's own fence); counts are summed;
- loads count every process's requests against the engine's per-rank figures;
- pause, resume and version bumps run on every process, so that each one refuses, holds, cuts
  and attributes its own requests alike.

A partial generation runs on the process that got it; its ``request_id`` is checked against
the other processes' requests while it starts, so a duplicate is refused wherever the first one
runs. Operations run on a peer's behalf are local there (:func:`local_only`), so nothing is
passed on twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from typing import Any, Iterator, Optional

from .control import InFlightCounts, RolloutControl
from .errors import ContractError
from .peers import Peers, PeerError
from .schema import AbortResult, LoadsResult, PartialGenerateResult, PauseState, SamplingParams, UpdateWeightVersionResult

# Set while an operation runs for this process alone (on a peer's behalf, or this process's own
# share of a call it passes on).
_local_only: contextvars.ContextVar[bool] = contextvars.ContextVar("engine_plugins_local_only", default=False)

# Time limit of the calls that do not carry one of their own (loads, resume, a bump).
QUICK_S = 10.0


@contextlib.contextmanager
def local_only() -> Iterator[None]:
    """Within this block, :class:`ServerControl` operations cover this process only."""
    token = _local_only.set(True)
    try:
        yield
    finally:
        _local_only.reset(token)


class ServerControl:
    """A :class:`~.control.RolloutControl` for a whole server of several API processes.

    Everything it does not pass on (the registry, the seam, partial generations, the pause
    state each process keeps in step) is the local control's.
    """

    def __init__(self, local: RolloutControl, peers: Peers) -> None:
        self.local = local
        self.peers = peers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.local, name)

    @property
    def dispatch_abort(self) -> Any:
        """The local control's abort dispatch (the plugin stack sets it to the abort hook)."""
        return self.local.dispatch_abort

    @dispatch_abort.setter
    def dispatch_abort(self, value: Any) -> None:
        self.local.dispatch_abort = value

    async def serve_peers(self) -> None:
        """Answer the other processes' calls with this process's share of each operation."""
        await self.peers.listen({
            "abort": self._peer_abort,
            "select_by_age": self._peer_select_by_age,
            "counts": self._peer_counts,
            "has_request_id": self._peer_has_request_id,
            "update_weight_version": self._peer_update_weight_version,
            "pause": self._peer_pause,
            "refuse_new": self._peer_refuse_new,
            "resume": self._peer_resume,
        })

    # --- operations over the whole server -------------------------------------------------

    async def abort(
        self, request_ids: Optional[list[str]], wait: bool, timeout_s: Optional[float] = None, reason: Optional[str] = None
    ) -> AbortResult:
        """Abort on every process at once; the counts are the server's."""
        if _local_only.get():
            return await self.local.abort(request_ids, wait, timeout_s, reason)
        timeout = self.local.abort_timeout_s if timeout_s is None else timeout_s
        with local_only():
            mine, theirs = await asyncio.gather(
                self.local.abort(request_ids, wait, timeout, reason),
                self._everywhere("abort", timeout, request_ids=request_ids, wait=wait, timeout_s=timeout, reason=reason),
            )
        results = [mine, *(AbortResult.model_validate(r) for r in theirs)]
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
        """Abort everywhere first when asked, then bump on every process (the engine core's
        version is shared; each process bumps its own order of versions and its spans)."""
        if _local_only.get():
            return await self.local.update_weight_version(new_version, abort_all_requests)
        aborted = 0
        if abort_all_requests:
            dispatch = self.local.dispatch_abort or self.abort
            aborted = (await dispatch(request_ids=None, wait=True, timeout_s=self.local.abort_timeout_s, reason="weight_version")).aborted
        with local_only():
            mine, _ = await asyncio.gather(
                self.local.update_weight_version(new_version, False),
                self._everywhere("update_weight_version", QUICK_S, new_version=new_version),
            )
        return mine.model_copy(update={"aborted": aborted})

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

    async def pause(self, mode: str, timeout_s: Optional[float] = None, clear_cache: Optional[bool] = None) -> PauseState:
        """Pause every process at once (each aborts, holds or drains its own requests)."""
        if _local_only.get():
            return await self.local.pause(mode, timeout_s, clear_cache)
        timeout = self.local.abort_timeout_s if timeout_s is None else timeout_s
        if mode == "abort":
            # The engine core is shared: the first process to pause it cuts every process's
            # requests. Each process must already be in abort mode by then, so that it names
            # the pause as their cancel reason and refuses new ones.
            self.local.refuse_new()
            await self._everywhere("refuse_new", QUICK_S)
        with local_only():
            mine, _ = await asyncio.gather(
                self.local.pause(mode, timeout, clear_cache),
                self._everywhere("pause", timeout, mode=mode, timeout_s=timeout, clear_cache=clear_cache),
            )
        return mine

    async def resume(self) -> PauseState:
        """Resume every process."""
        if _local_only.get():
            return await self.local.resume()
        with local_only():
            mine, _ = await asyncio.gather(self.local.resume(), self._everywhere("resume", QUICK_S))
        return mine

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

    async def _peer_update_weight_version(self, new_version: str) -> dict:
        with local_only():
            return (await self.local.update_weight_version(new_version, False)).model_dump()

    async def _peer_pause(self, mode: str, timeout_s: float, clear_cache: Optional[bool]) -> dict:
        with local_only():
            return (await self.local.pause(mode, timeout_s, clear_cache)).model_dump()

    async def _peer_refuse_new(self) -> None:
        self.local.refuse_new()

    async def _peer_resume(self) -> dict:
        with local_only():
            return (await self.local.resume()).model_dump()

    # --- helpers ----------------------------------------------------------------------------

    async def _all_counts(self) -> list[InFlightCounts]:
        theirs = [] if _local_only.get() else await self._everywhere("counts", QUICK_S)
        return [self.local.in_flight_counts(), *(InFlightCounts(**c) for c in theirs)]

    async def _everywhere(self, op: str, limit_s: float, /, **args: Any) -> list[Any]:
        """*op* with *args* on every other process, within its time limit *limit_s*."""
        try:
            return await self.peers.call_all(op, limit_s, **args)
        except PeerError as exc:
            raise ContractError(503, f"{exc}; this process's share was done", "unavailable") from None
