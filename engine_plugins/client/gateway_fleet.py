"""A fleet of the workers behind an smg gateway (``smg launch --enable-rl``): smg's discovery
finds them and one smg fan-out per operation makes each call, giving one result per worker.

The workers must speak the contract (the plugin on each engine): smg forwards each call verbatim,
so every answer is read with the contract's own models, as :mod:`.contract_ops` reads a direct
answer. A worker whose answer is not the contract's is a ``protocol`` failure naming it. When smg
itself cannot be reached or refuses, the operation has one failed result, for the gateway.
"""

from __future__ import annotations

import time
from typing import Any, AsyncContextManager, Callable, Optional, Sequence, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from engine_plugins.contract.schema import (
    DEFAULT_LEASE_S,
    AbortResult,
    LoadsResult,
    PauseState,
    UpdateWeightVersionResult,
    WeightSwapResult,
)
from engine_plugins.client.detect import Detection, Flavor
from engine_plugins.client.errors import ServerError, answer_problems
from engine_plugins.client.fleet_results import (
    NOT_BEGUN,
    FleetResult,
    ServerResult,
    WeightSwapRun,
    weight_swap_run,
)
from engine_plugins.client.gateway import DEFAULT_SELECTOR, Gateway, WorkerAnswer
from engine_plugins.client.loads import load_from_contract
from engine_plugins.client.polling import Backoff, Deadline
from engine_plugins.client.results import (
    AbortOutcome,
    PauseOutcome,
    Progress,
    StaleSelector,
    VersionOutcome,
    no_progress,
)
from engine_plugins.client.transport import HttpClientOwner

Answer = TypeVar("Answer", bound=BaseModel)

# A worker's own wait ends this much before the operation's deadline, so that its answer, and
# smg's, still arrive in time.
WAIT_MARGIN_S = 0.5


class GatewayFleet(HttpClientOwner):
    """The workers behind an smg gateway, behind one API:
    ``async with GatewayFleet("http://smg:30000", api_key=...) as fleet: ...``.

    Every operation is one smg fan-out to the workers *selector* matches (smg's label selector;
    default every HTTP worker), which must have the plugin; *api_key* is the gateway's key (smg
    sends each worker its own). The one HTTP client is the gateway's: made here (and closed by
    :meth:`aclose`) unless *http* is given.
    """

    def __init__(
        self, url: str, api_key: Optional[str] = None, http: Optional[httpx.AsyncClient] = None, selector: str = DEFAULT_SELECTOR
    ) -> None:
        super().__init__(api_key, http)
        self.gateway = Gateway(url, self.http, selector)

    def _api(self, engine: str) -> str:
        return f"engine-plugins contract on {engine} via smg {self.gateway.url}"

    async def _fan(
        self,
        operation: str,
        method: str,
        path: str,
        body: Any,
        read: Callable[[Any, WorkerAnswer], Any],
        timeout_s: float,
        selector: Optional[str] = None,
    ) -> FleetResult:
        """One fan-out; each worker's answer through *read(body, answer)*, or its failure."""
        started = time.monotonic()
        try:
            answers = await self.gateway.fanout(method, path, body, timeout_s, selector)
        except ServerError as exc:
            gateway = ServerResult(self.gateway.url, False, error=f"smg: {exc.message}", kind=exc.kind, api="smg gateway",
                                   seconds=time.monotonic() - started)
            return FleetResult(operation, [gateway], time.monotonic() - started)
        results = []
        for answer in answers:
            result = ServerResult(answer.url, False, seconds=answer.seconds, api=f"via smg {self.gateway.url}")
            if answer.error is not None:
                result.set_failure(answer.error.kind, answer.error.message)
            else:
                try:
                    result.set_value(read(answer.body, answer))
                except ServerError as exc:
                    result.set_failure(exc.kind, exc.message)
                engine = answer.body.get("engine") if isinstance(answer.body, dict) else None
                if isinstance(engine, str):
                    result.api = self._api(engine)
            results.append(result)
        return FleetResult(operation, results, time.monotonic() - started)

    async def detect(self, timeout_s: float = 10.0) -> FleetResult:
        """What every worker is: its contract ``/v1/loads`` through smg, with smg's engine version."""
        try:
            versions = {w.url: w.engine_version for w in await self.gateway.workers(timeout_s)}
        except ServerError:
            versions = {}

        def read(body: Any, answer: WorkerAnswer) -> Detection:
            loads = _contract(LoadsResult, body, answer, "GET /v1/loads")
            return Detection(Flavor.CONTRACT, loads.engine, versions.get(answer.url) or loads.version or None, self._api(loads.engine))

        return await self._fan("detect", "GET", "v1/loads", None, read, timeout_s)

    async def loads(self, timeout_s: float = 10.0) -> FleetResult:
        """Every worker's loads, in one fan-out of ``GET /v1/loads``."""
        return await self._fan("loads", "GET", "v1/loads", None,
                               lambda b, a: load_from_contract(_contract(LoadsResult, b, a, "GET /v1/loads")), timeout_s)

    async def abort(self, request_ids: Optional[Sequence[str]] = None, wait: bool = False, timeout_s: float = 30.0) -> FleetResult:
        """Abort everything (or exactly *request_ids*, on every worker) once; with *wait*, until
        released: one fan-out of ``POST /abort_requests``."""
        return await self._abort("abort", {"request_ids": list(request_ids) if request_ids else None}, wait, timeout_s)

    async def abort_stale(
        self,
        admitted_before: Optional[str] = None,
        max_staleness: Optional[int] = None,
        wait: bool = False,
        timeout_s: float = 30.0,
    ) -> FleetResult:
        """Abort the requests admitted under a version older than *admitted_before* or
        *max_staleness* or more bumps ago (give exactly one), with *wait* until released: one
        fan-out of ``POST /abort_requests`` by age, each worker selecting by its own bumps."""
        selector = StaleSelector(admitted_before, max_staleness)  # a bad selector is the caller's error, raised here
        return await self._abort("abort_stale", selector.body(), wait, timeout_s)

    async def _abort(self, operation: str, selection: dict, wait: bool, timeout_s: float, selector: Optional[str] = None) -> FleetResult:
        body: dict[str, Any] = {**selection, "wait": wait}
        if wait:
            body["timeout_s"] = _wait_s(timeout_s)
        return await self._fan(operation, "POST", "abort_requests", body, _read_abort, timeout_s, selector)

    async def abort_until_idle(self, timeout_s: float = 60.0, progress: Progress = no_progress) -> FleetResult:
        """Abort with wait on every worker until each is idle, all by *timeout_s*: the first round
        goes to every worker, each next round only to the workers not idle yet (``id in (...)``)."""
        started = time.monotonic()
        deadline = Deadline.after(timeout_s)
        backoff = Backoff()
        final: dict[str, Any] = {}  # worker URL -> its latest result, aborted and rounds summed
        selector: Optional[str] = None
        while deadline.remaining() > 0.05:
            round_result = await self._abort("abort_until_idle", {}, True, deadline.remaining(), selector)
            if _gateway_failed(round_result):
                if not final:
                    return round_result
                break
            for result in round_result.results:
                before = final.get(result.url)
                if before is not None and before.ok and result.ok:
                    result.value.aborted = (before.value.aborted or 0) + (result.value.aborted or 0)
                    result.value.rounds = before.value.rounds + 1
                final[result.url] = result
                idle = result.ok and result.value.idle
                progress(result.url, "idle" if idle else ("waiting" if result.ok else "failed"),
                         result.value.in_flight if result.ok else None)
            busy = [url for url, r in final.items() if r.ok and not r.value.idle]
            if not busy:
                break
            # Requests arrived after the abort: again, on those workers only.
            ids = await self._ids_by_url(deadline.remaining())
            if any(url not in ids for url in busy):
                break
            selector = f"id in ({','.join(ids[url] for url in busy)})"
            await backoff.sleep(deadline)
        for result in final.values():
            if result.ok and not result.value.idle:
                result.ok, result.kind, result.error = False, "timeout", "requests still in flight at the deadline"
                result.value.timed_out = True
            if result.value is not None:
                result.value.seconds = time.monotonic() - started
            result.seconds = time.monotonic() - started
        return FleetResult("abort_until_idle", [final[url] for url in sorted(final)], time.monotonic() - started)

    async def _ids_by_url(self, timeout_s: float) -> dict[str, str]:
        try:
            return {w.url: w.id for w in await self.gateway.workers(timeout_s)}
        except ServerError:
            return {}

    async def update_weight_version(self, new_version: str, abort_all_requests: bool = False, timeout_s: float = 30.0) -> FleetResult:
        """One fan-out of ``POST /update_weight_version`` (``abort_all_requests`` always explicit)."""

        def read(body: Any, answer: WorkerAnswer) -> VersionOutcome:
            r = _contract(UpdateWeightVersionResult, body, answer, "POST /update_weight_version")
            return VersionOutcome(r.new_version, r.previous_version, r.aborted)

        body = {"new_version": new_version, "abort_all_requests": abort_all_requests}
        return await self._fan("update_weight_version", "POST", "update_weight_version", body, read, timeout_s)

    async def pause(self, mode: str = "abort", timeout_s: float = 30.0, clear_cache: Optional[bool] = None) -> FleetResult:
        """One fan-out of ``POST /pause`` in *mode* (with *clear_cache* when it is given)."""
        body = {"mode": mode} if clear_cache is None else {"mode": mode, "clear_cache": clear_cache}
        return await self._fan("pause", "POST", "pause", body, _read_pause("POST /pause"), timeout_s)

    def weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                    lease_s: float = DEFAULT_LEASE_S, timeout_s: float = 30.0) -> AsyncContextManager[WeightSwapRun]:
        """``async with fleet.weight_swap("v8") as swap: <load the weights>``: one fan-out begins
        the swap on every worker; on a normal exit one more commits it on the workers that began
        (``swap.began``, ``swap.committed``: one result per worker). On an exception the swaps
        are left open, the workers paused, and their leases report them expired."""
        return weight_swap_run(lambda: self.begin_weight_swap(version, mode, clear_cache, lease_s, timeout_s),
                               lambda began: self.commit_weight_swap(version, began, timeout_s))

    async def begin_weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                                lease_s: float = DEFAULT_LEASE_S, timeout_s: float = 30.0) -> FleetResult:
        """Begin a weight swap to *version* on every worker: one fan-out of ``POST /weight_swap/begin``."""
        body: dict[str, Any] = {"version": version, "mode": mode, "lease_s": lease_s}
        if clear_cache is not None:
            body["clear_cache"] = clear_cache
        return await self._fan("begin_weight_swap", "POST", "weight_swap/begin", body,
                               _read_swap("POST /weight_swap/begin"), timeout_s)

    async def commit_weight_swap(self, version: str, began: Optional[Sequence[str]] = None, timeout_s: float = 30.0) -> FleetResult:
        """One fan-out of ``POST /weight_swap/commit`` to every worker, or to those (by URL) in
        *began*, the ones whose begin succeeded; the others then get a failure saying so."""
        read = _read_swap("POST /weight_swap/commit")
        if began is None:
            return await self._fan("commit_weight_swap", "POST", "weight_swap/commit", {"version": version}, read, timeout_s)
        ids = await self._ids_by_url(timeout_s)
        known = [url for url in began if url in ids]
        result = FleetResult("commit_weight_swap", [], 0.0)
        if known:
            selector = f"id in ({','.join(ids[url] for url in known)})"
            result = await self._fan("commit_weight_swap", "POST", "weight_swap/commit", {"version": version}, read,
                                     timeout_s, selector)
            if _gateway_failed(result):
                return result
        for url in sorted((set(ids) | set(began)) - set(known)):
            why = "smg did not list it for the commit" if url in began else NOT_BEGUN
            result.results.append(ServerResult(url, False, error=why, kind="unsupported", api=f"via smg {self.gateway.url}"))
        result.results.sort(key=lambda r: r.url)
        return result

    async def resume(self, timeout_s: float = 30.0) -> FleetResult:
        """One fan-out of ``POST /resume`` (with a ``{}`` body, as smg's own client sends)."""
        return await self._fan("resume", "POST", "resume", {}, _read_pause("POST /resume"), timeout_s)

    async def is_paused(self, timeout_s: float = 10.0) -> FleetResult:
        """One fan-out of ``GET /is_paused``."""
        return await self._fan("is_paused", "GET", "is_paused", None, _read_pause("GET /is_paused"), timeout_s)


def _gateway_failed(result: FleetResult) -> bool:
    """The fan-out failed as a whole: its one result is the gateway's."""
    return len(result.results) == 1 and result.results[0].api == "smg gateway"


def _wait_s(timeout_s: float) -> float:
    """How long a worker waits for release, inside the operation's *timeout_s*."""
    return max(timeout_s - WAIT_MARGIN_S, timeout_s * 0.8)


def _contract(model: type[Answer], body: Any, answer: WorkerAnswer, where: str) -> Answer:
    """*body* read as the contract's *model*; a ``protocol`` failure naming the worker otherwise."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise ServerError(answer.url, "protocol", f"{where} through smg: not the contract's answer ({answer_problems(exc)}); "
                          "is the plugin loaded on this worker?") from None


def _read_abort(body: Any, answer: WorkerAnswer) -> AbortOutcome:
    r = _contract(AbortResult, body, answer, "POST /abort_requests")
    return AbortOutcome(aborted=r.aborted, in_flight=r.in_flight, idle=r.idle, timed_out=r.timed_out, seconds=answer.seconds)


def _read_swap(where: str) -> Callable[[Any, WorkerAnswer], WeightSwapResult]:
    return lambda body, answer: _contract(WeightSwapResult, body, answer, where)


def _read_pause(where: str) -> Callable[[Any, WorkerAnswer], PauseOutcome]:
    def read(body: Any, answer: WorkerAnswer) -> PauseOutcome:
        state = _contract(PauseState, body, answer, where)
        return PauseOutcome(state.is_paused, state.mode)

    return read
