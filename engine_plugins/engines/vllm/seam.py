"""The contract's seam over vLLM's ``AsyncLLM`` (one per API server process): generation, abort,
loads, weight versions and pause. vLLM is reached only through :class:`~.facade.VllmEngine`,
and the registry is kept by :class:`~.tracking.Tracker`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Optional, Sequence

from engine_plugins.contract.errors import ContractError
from engine_plugins.core.model_limits import ModelLimits
from engine_plugins.core.registry import InFlight
from engine_plugins.contract.schema import SamplingParams
from engine_plugins.core.seam import Generation
from engine_plugins.engines.vllm.tracking import Tracker


class VllmSeam:
    """:class:`~engine_plugins.core.seam.EngineSeam` over one ``AsyncLLM`` (one API server process)."""

    engine = "vllm"

    def __init__(self, tracker: Tracker, api_keys: Sequence[str] = ()) -> None:
        self.vllm = tracker.vllm
        self.tracker = tracker
        self.registry = tracker.registry
        self._keys = list(api_keys)

    def ready(self) -> bool:
        """False once the engine core has died."""
        return not self.vllm.errored()

    def engine_version(self) -> str:
        """vLLM's ``__version__``."""
        return self.vllm.names.version

    def loads_header(self) -> dict:
        """vLLM has no ``/v1/loads`` of its own: nothing to keep."""
        return {}

    def model_limits(self) -> ModelLimits:
        """The served model's vocabulary and ``--max-model-len``, from the engine client."""
        return self.vllm.model_limits()

    def api_keys(self) -> list[str]:
        """vLLM's own ``--api-key`` values (or ``VLLM_API_KEY``)."""
        return list(self._keys)

    async def generate(self, rid: str, input_ids: list[int], params: SamplingParams) -> AsyncIterator[Generation]:
        """Generate on ``AsyncLLM.generate`` with engine id *rid*; one cumulative snapshot at the end."""
        client_errors = self.vllm.names.client_errors
        try:
            sampling = self.vllm.sampling_params(params)
            # Rendering first avoids vLLM's deprecated raw-prompt path.
            engine_input = await self.vllm.render_tokens(input_ids)
        except client_errors as exc:
            raise ContractError(400, f"vLLM refused the request: {exc}") from None
        outputs = self.vllm.generate(engine_input, sampling, rid)
        async with contextlib.aclosing(outputs):
            try:
                async for output in outputs:
                    yield self.vllm.read_output(output)
            except self.vllm.names.paused_errors:
                if not self.vllm.pause_held:
                    # Paused by someone else (0.34's /checkpoint/prepare): no resume of ours will come.
                    raise ContractError(503, "vLLM refused the request: the engine is paused outside the contract "
                                             "(a /checkpoint/prepare until /checkpoint/restore); retry elsewhere") from None
                # vLLM 0.33 on: the engine core rejected the request during the contract's abort
                # pause. The stream ends without a finish reason, so the control reports it
                # cancelled with the tokens it had.
                return
            except client_errors as exc:
                raise ContractError(400, f"vLLM refused the request: {exc}") from None
            except self.vllm.names.status_errors as exc:
                # vLLM's own routes answer these with the status they carry (503: try elsewhere).
                raise ContractError(int(exc.http_status), f"vLLM refused the request: {exc.message}") from None

    async def abort(self, entries: Sequence[InFlight]) -> None:
        """Abort the engine-core requests of *entries*; those not sent yet are aborted once sent."""
        ids = self.tracker.internal_ids(entries)
        if ids:
            await self.vllm.abort_internal(ids)

    async def rank_loads(self) -> list[dict]:
        """Exact running and waiting counts from each engine core's scheduler."""
        counts = await self.vllm.request_counts()
        return [
            {"dp_rank": rank, "num_running_reqs": running, "num_waiting_reqs": waiting}
            for rank, (running, waiting) in enumerate(counts)
        ]

    def weight_version(self) -> str:
        """The version the engine core stamps on new tokens, as last set through this engine client."""
        return self.tracker.weight_version

    async def set_weight_version(self, version: str) -> None:
        """vLLM's version update: later tokens carry *version*; nothing is aborted."""
        await self.vllm.update_weight_version(version)

    async def pause(self, mode: str, clear_cache: Optional[bool] = None) -> None:
        """vLLM's own pause in *mode*, with vLLM's ``clear_cache`` (None: vLLM's default, true).

        ``keep``: running requests freeze and new ones queue; with ``clear_cache`` the engine
        core also drops the frozen requests' KV and the prefix cache, and recomputes the
        requests on resume (under the weights loaded by then), else they go on from their KV.
        ``abort``: the engine core aborts what it holds and new requests queue; the control
        then aborts every accepted request, which covers the rest."""
        await self.vllm.pause_generation(mode, clear_cache=True if clear_cache is None else clear_cache)

    async def drain(self, clear_cache: Optional[bool] = None) -> list[InFlight]:
        """vLLM's ``wait`` pause: new requests queue, the engine core's running requests finish,
        and vLLM returns once it is idle (then clears its caches unless *clear_cache* is false).
        Returns once the final outputs of the requests that ran have been read too
        (:meth:`drain_share`)."""
        await self.vllm.pause_generation("wait", clear_cache=True if clear_cache is None else clear_cache)
        return await self.drain_share()

    async def drain_share(self) -> list[InFlight]:
        """This API process's share of a ``wait`` pause (made here or through another process):
        returns once the final outputs of its requests that ran have been read.

        vLLM's drain finishes only the requests that were running: those still in its waiting
        queue stay queued until resume. So the requests this process has sent to the engine core
        are waited for until no more of them are left than the engine core holds queued.
        """
        admitted = [e for e in self.registry.select() if e.dispatched]
        queued = sum(waiting for _, waiting in await self.vllm.request_counts())
        pending = [e for e in admitted if not e.released.is_set()]
        while len(pending) > queued:
            waiters = [asyncio.ensure_future(e.released.wait()) for e in pending]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
            pending = [e for e in pending if not e.released.is_set()]
        return []

    def note_pause(self, paused: bool) -> None:
        """The contract's pause, made through another API process: a request the engine core
        rejects as paused here was rejected by it (see :meth:`generate`)."""
        self.vllm.pause_held = paused

    def note_weight_version(self, version: str) -> None:
        """The engine core's version, set through another API process."""
        self.tracker.weight_version = version
        self.vllm.learn_weight_version(version)

    async def resume(self) -> None:
        """vLLM's resume: queued and frozen requests go on."""
        await self.vllm.resume_generation()

    def engine_pause(self) -> None:
        """None: every pause of vLLM's scheduler goes through the contract (the plugin serves
        vLLM's own ``/pause`` and ``/resume``), so the contract's record is the truth."""
        return None
