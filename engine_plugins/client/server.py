"""An async client for one server, whichever API it speaks (see :mod:`.detect`).

Every method raises :class:`~.errors.ServerError` with a clear message on failure; the fleet
(:mod:`.fleet`) turns those into per-server results.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Optional, Sequence, Union

from engine_plugins.contract.schema import DEFAULT_LEASE_S, PartialGenerateResult, WeightSwapResult
from engine_plugins.client.contract_ops import ContractOps
from engine_plugins.client.errors import ServerError
from engine_plugins.client.detect import Detection, Flavor, detect
from engine_plugins.client.loads import Load
from engine_plugins.client.polling import Backoff, Deadline
from engine_plugins.client.ray_transport import RayTransport, is_actor_handle
from engine_plugins.client.results import (
    AbortOutcome,
    PauseOutcome,
    Progress,
    StaleSelector,
    VersionOutcome,
    no_progress,
)
from engine_plugins.client.sglang_ops import SGLangOps
from engine_plugins.client.transport import DEFAULT_TIMEOUT_S, HttpClient, HttpClientOwner, Transport
from engine_plugins.client.vllm_ops import VLLMOps

Ops = Union[ContractOps, SGLangOps, VLLMOps]
DETECT_TIMEOUT_S = 10.0


class ServerClient(HttpClientOwner):
    """One server. ``async with ServerClient(url, api_key=...) as server: await server.loads()``.

    *url*: the server's base URL, or the handle of a Ray actor holding an engine in-process
    (:class:`engine_plugins.inprocess.ContractActor`), reached through Ray
    (:mod:`.ray_transport`; no API key: the handle is the credential). ``self.url`` names the
    server in results: the URL, or ``ray://<actor name or id>`` (*name* when given).

    *http*: an HTTP client to share (an httpx client, or the one a fleet shares among its servers);
    otherwise the server makes and closes its own (:mod:`.http1`). The API is detected on first use and remembered (:meth:`detection`).
    """

    def __init__(self, url: Union[str, Any], api_key: Optional[str] = None, http: Optional[HttpClient] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(api_key, http)
        self.transport: Union[Transport, RayTransport] = (
            RayTransport(url, name) if is_actor_handle(url) else Transport(url, self.http)
        )
        self.url = self.transport.url
        self._detection: Optional[Detection] = None
        self._ops: Optional[Ops] = None

    async def detection(self, timeout_s: float = DETECT_TIMEOUT_S) -> Detection:
        """Which API the server speaks (detected once, then remembered)."""
        if self._detection is None:
            found = await detect(self.transport, timeout_s)
            if found.flavor is Flavor.CONTRACT:
                self._ops = ContractOps(self.transport)
            elif found.flavor is Flavor.SGLANG:
                self._ops = SGLangOps(self.transport, legacy_loads="/get_load" in found.detail)
            else:
                self._ops = VLLMOps(self.transport)
            self._detection = found
        return self._detection

    async def ops(self, timeout_s: float = DETECT_TIMEOUT_S) -> Ops:
        """The operations for the detected API."""
        await self.detection(min(timeout_s, DETECT_TIMEOUT_S))
        assert self._ops is not None
        return self._ops

    async def loads(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> Load:
        """Running, waiting and total requests (see :class:`~.loads.Load`)."""
        return await (await self.ops(timeout_s)).loads(timeout_s)

    async def abort(self, request_ids: Optional[Sequence[str]] = None, wait: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> AbortOutcome:
        """Abort every request (no ids) or exactly *request_ids*; with *wait*, until they are released
        or *timeout_s* (``timed_out`` says which)."""
        ops = await self.ops(timeout_s)
        return await ops.abort(list(request_ids) if request_ids else None, wait, timeout_s)

    async def abort_stale(
        self,
        admitted_before: Optional[str] = None,
        max_staleness: Optional[int] = None,
        wait: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> AbortOutcome:
        """Abort the requests admitted under a version older than *admitted_before*, or
        *max_staleness* or more bumps ago (give exactly one); with *wait*, until they are released
        or *timeout_s*. Needs the plugin: a server without it is an ``unsupported`` failure and
        nothing is aborted there. A version the server never had is an ``http`` failure (400)."""
        selector = StaleSelector(admitted_before, max_staleness)
        return await (await self.ops(timeout_s)).abort_stale(selector, wait, timeout_s)

    async def abort_until_idle(
        self, timeout_s: float = 60.0, deadline: Optional[Deadline] = None, progress: Progress = no_progress
    ) -> AbortOutcome:
        """Abort everything until the server holds no request, bounded by *deadline* (or *timeout_s*).

        Never loops without bound: at the deadline the outcome has ``timed_out`` true and
        ``idle`` false, with the last known count.
        """
        deadline = deadline or Deadline.after(timeout_s)
        ops = await self.ops(max(deadline.remaining(), 0.05))
        return await ops.drain(deadline, progress)

    async def update_weight_version(self, new_version: str, abort_all_requests: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> VersionOutcome:
        """Set the weight version; in-flight requests keep going unless *abort_all_requests*."""
        return await (await self.ops(timeout_s)).update_weight_version(new_version, abort_all_requests, timeout_s)

    async def pause(self, mode: str = "abort", timeout_s: float = DEFAULT_TIMEOUT_S, clear_cache: Optional[bool] = None) -> PauseOutcome:
        """Pause: ``abort`` returns in-flight work now, ``keep`` freezes it until :meth:`resume`.

        *clear_cache* is vLLM's (None: the server's default, true): in ``keep`` mode true drops
        the frozen requests' KV and recomputes them on resume (under the weights loaded by
        then), false keeps it."""
        if mode not in ("abort", "keep"):
            raise ValueError(f"mode must be 'abort' or 'keep', not {mode!r}")
        return await (await self.ops(timeout_s)).pause(mode, timeout_s, clear_cache)

    async def begin_weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                                lease_s: float = DEFAULT_LEASE_S, timeout_s: float = DEFAULT_TIMEOUT_S) -> WeightSwapResult:
        """``POST /weight_swap/begin`` (the plugin's; a server without it is ``unsupported``)."""
        return await (await self._contract_ops("weight swaps", timeout_s)).begin_weight_swap(version, mode, clear_cache, lease_s, timeout_s)

    async def commit_weight_swap(self, version: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> WeightSwapResult:
        """``POST /weight_swap/commit`` of the open swap to *version*."""
        return await (await self._contract_ops("weight swaps", timeout_s)).commit_weight_swap(version, timeout_s)

    @contextlib.asynccontextmanager
    async def weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                          lease_s: float = DEFAULT_LEASE_S, timeout_s: float = DEFAULT_TIMEOUT_S) -> AsyncIterator[WeightSwapResult]:
        """``async with server.weight_swap("v8"): <load the weights>``: begin, then commit on a
        normal exit. On an exception the swap is left open, the server paused: its weights may be
        half-loaded; the lease then reports it expired."""
        began = await self.begin_weight_swap(version, mode, clear_cache, lease_s, timeout_s)
        yield began
        await self.commit_weight_swap(version, timeout_s)

    async def _contract_ops(self, what: str, timeout_s: float) -> ContractOps:
        """The contract's operations, or an ``unsupported`` failure saying *what* needs the plugin."""
        ops = await self.ops(timeout_s)
        if not isinstance(ops, ContractOps):
            found = await self.detection()
            raise ServerError(self.url, "unsupported", f"{what} need the engine-plugins plugin; this server is {found.detail}; nothing was sent")
        return ops

    async def resume(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> PauseOutcome:
        """Resume after a pause (harmless when not paused)."""
        return await (await self.ops(timeout_s)).resume(timeout_s)

    async def is_paused(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> PauseOutcome:
        """The pause state (``is_paused`` None when the server cannot tell)."""
        return await (await self.ops(timeout_s)).is_paused(timeout_s)

    async def partial_generate(
        self,
        input_ids: Sequence[int],
        sampling_params: Optional[dict] = None,
        request_id: Optional[str] = None,
        timeout_s: Optional[float] = None,
        max_staleness: Optional[int] = None,
    ) -> PartialGenerateResult:
        """``/partial_generate``: the contract's answer (output ids, logprobs, finish reason,
        ``cancelled`` and ``cancel_reason``, weight-version spans). *timeout_s* None waits as long
        as generation takes. *max_staleness*: the server aborts the request once that many
        version bumps have happened since it was admitted (``cancel_reason`` ``"stale"``)."""
        body: dict[str, Any] = {"input_ids": list(input_ids), "sampling_params": dict(sampling_params or {})}
        if request_id is not None:
            body["request_id"] = request_id
        if max_staleness is not None:
            body["max_staleness"] = max_staleness
        ops = await self.ops(DETECT_TIMEOUT_S)
        return await ops.partial_generate(body, timeout_s if timeout_s is not None else 3600.0)

    async def wait_resumed(self, timeout_s: float, signal: Optional[asyncio.Event] = None) -> bool:
        """Wait until the server is not paused: *signal* set, or ``/is_paused`` false (polled with
        backoff). Returns False at *timeout_s*, or at once if the server cannot say."""
        deadline = Deadline.after(timeout_s)
        if signal is not None:
            try:
                await asyncio.wait_for(signal.wait(), timeout_s)
                return True
            except asyncio.TimeoutError:
                return False
        backoff = Backoff(first_s=0.02, cap_s=0.5)
        while True:
            state = await self.is_paused(max(deadline.remaining(), 0.5))
            if state.is_paused is None:
                return False
            if not state.is_paused:
                return True
            if deadline.expired():
                return False
            await backoff.sleep(deadline)
