"""The contract's seam over SGLang's TokenizerManager (one per TokenizerManager).

Every call goes to the TokenizerManager the HTTP routes use, so the contract sees the same
requests, pause gate and weight version as SGLang's own routes. SGLang is reached only through
:class:`~.facade.SGLangEngine`.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from typing import AsyncIterator, Optional, Sequence

from engine_plugins.contract.errors import ContractError
from engine_plugins.core.model_limits import ModelLimits
from engine_plugins.core.registry import InFlight
from engine_plugins.contract.schema import SamplingParams, WeightVersionSpan
from engine_plugins.core.seam import EnginePause, Generation
from engine_plugins.engines.sglang.tracking import Tracker

logger = logging.getLogger(__name__)

# SGLang's finish_reason types in the contract's words.
_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


class SGLangSeam:
    """:class:`~engine_plugins.core.seam.EngineSeam` on one SGLang TokenizerManager.

    Pause modes: ``keep`` is SGLang's ``retract`` (the running requests' KV is dropped and
    recomputed on resume, vLLM's keep with ``clear_cache``), or its ``in_place`` with
    ``clear_cache: false`` (the scheduler freezes, KV cache kept).
    ``abort`` closes the TokenizerManager's pause gate only, so the control's abort of the
    running requests comes back at once with every token (SGLang's own abort-mode pause polls
    every second). While paused ``in_place``, an abort of running requests first turns the pause
    into ``retract``, since aborted running requests come back only once the scheduler runs
    again; ``retract`` returns them now with their tokens, and the requests not aborted are
    recomputed from their tokens after resume. A keep pause that finds aborted requests still
    running (the scheduler ends them at its next step, which an ``in_place`` pause would never
    take) is a ``retract`` pause too, and their aborts are sent again so that the scheduler ends
    them from its waiting queue at once.

    The scheduler's pause state changes under one lock, so that a pause, a resume and an abort
    that race each other leave the scheduler in the state of the last one.
    """

    engine = "sglang"

    def __init__(self, tracker: Tracker) -> None:
        self.sglang = tracker.sglang
        self.tracker = tracker
        self.registry = tracker.registry
        self._scheduler_state = asyncio.Lock()

    @property
    def _scheduler_pause(self) -> Optional[str]:
        """``in_place`` or ``retract`` while the scheduler is paused: the tracker's record, which
        SGLang's own pause and continue routes update too."""
        return self.tracker.scheduler_pause

    def ready(self) -> bool:
        """The seam exists only once SGLang has built its TokenizerManager."""
        return True

    def model_limits(self) -> ModelLimits:
        """The served model's vocabulary and context length, from the TokenizerManager."""
        return self.sglang.model_limits()

    def engine_version(self) -> str:
        """SGLang's ``__version__`` (its own ``/v1/loads`` reports it as ``version``)."""
        return self.sglang.names.version

    def loads_header(self) -> dict:
        """SGLang's own top-level ``/v1/loads`` fields: ``accelerator``, ``num_accelerators``."""
        return self.sglang.names.loads_header()

    def api_keys(self) -> list[str]:
        """SGLang's ``--admin-api-key``, else its ``--api-key`` (its ADMIN_OPTIONAL rule)."""
        return self.sglang.names.api_keys()

    # --- generation ----------------------------------------------------------------------

    def sampling_params(self, params: SamplingParams) -> dict:
        """The contract's sampling params in SGLang's names.

        ``seed`` is SGLang's ``sampling_seed``, which SGLang honours only when launched with
        ``--enable-deterministic-inference`` and otherwise ignores; a seed sent to a server that
        would ignore it is refused (400).
        """
        out = {
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "ignore_eos": params.ignore_eos,
        }
        if params.stop_token_ids:
            out["stop_token_ids"] = list(params.stop_token_ids)
        if params.seed is not None:
            if not self.sglang.names.deterministic_inference():
                raise ContractError(
                    400,
                    "sampling_params.seed: this SGLang server ignores seeds; "
                    "launch it with --enable-deterministic-inference to use them",
                )
            out["sampling_seed"] = params.seed
        return out

    async def generate(self, rid: str, input_ids: list[int], params: SamplingParams) -> AsyncIterator[Generation]:
        """Stream from SGLang and keep the last chunk: every token, even on abort.

        Streamed because a non-stream request aborted from SGLang's waiting queue comes back cut
        to a multiple of 50 tokens. Logprobs are SGLang's ``output_token_logprobs``:
        temperature-scaled unless ``SGLANG_RETURN_ORIGINAL_LOGPROB`` is set.
        """
        stream = self.sglang.generate(rid, input_ids, self.sampling_params(params))
        incremental = self.sglang.incremental_streaming()
        out = Generation()
        try:
            async for chunk in stream:
                _apply_chunk(out, chunk, incremental)
                yield out
        finally:
            await stream.aclose()

    # --- abort -----------------------------------------------------------------------------

    async def abort(self, entries: Sequence[InFlight]) -> None:
        """Dispatched entries: SGLang's abort by rid. Held ones: ended by the tracker now.

        SGLang's scheduler aborts every rid that *starts with* the one sent. Contract requests
        use fixed-length ids, so this is exact for them; a native request whose caller-chosen
        rid is a prefix of another in-flight rid also aborts that one.

        When *entries* cover every request state SGLang holds (an abort of all), one abort-all
        message is sent instead of one per request: the scheduler scans its queues once per
        message, so n messages cost it n scans of n requests. It is exact: it is sent with no
        await after the check, and a request the TokenizerManager dispatches later reaches the
        scheduler after it, on the same socket.
        """
        dispatched = [e for e in entries if e.dispatched]
        if dispatched:
            async with self._scheduler_state:
                if self._scheduler_pause == "in_place":
                    await self.sglang.pause_generation("retract")
                # Sent under the lock: a keep pause that comes next sees these as aborted.
                targeted = {e.rid for e in entries}
                rids = self.sglang.rids()
                with self.tracker.own_aborts():
                    if len(dispatched) > 1 and all(rid in targeted for rid in rids):
                        self.sglang.abort_all()
                    else:
                        self._warn_prefix_collisions([e.rid for e in dispatched], targeted, rids)
                        for entry in dispatched:
                            self.sglang.abort(entry.rid)
        if len(dispatched) < len(entries):
            self.tracker.wake_held()

    @staticmethod
    def _warn_prefix_collisions(aborting: Sequence[str], targeted: set[str], rids: Sequence[str]) -> None:
        """Warn when an abort by rid reaches requests not targeted: SGLang matches by prefix. The
        rids that start with one are next to it in sorted order, so this is one sort, not a scan
        of every rid per rid aborted."""
        ordered = sorted(rids)
        for rid in aborting:
            others = []
            i = bisect.bisect_right(ordered, rid)
            while i < len(ordered) and ordered[i].startswith(rid):
                if ordered[i] not in targeted:
                    others.append(ordered[i])
                i += 1
            if others:
                logger.warning(
                    "engine_plugins: aborting rid %r also aborts %s: SGLang's scheduler matches rids by prefix", rid, others
                )

    # --- loads and weight version ------------------------------------------------------------

    async def rank_loads(self) -> list[dict]:
        """SGLang's ``/v1/loads`` figures per DP rank, every field kept."""
        return await self.sglang.rank_loads()

    def weight_version(self) -> str:
        """The version SGLang stamps on new tokens."""
        return self.sglang.weight_version()

    async def set_weight_version(self, version: str) -> None:
        """SGLang's version update without its abort."""
        await self.sglang.set_weight_version(version)

    # --- pause -----------------------------------------------------------------------------

    async def pause(self, mode: str, clear_cache: Optional[bool] = None) -> None:
        """``keep``: SGLang's ``retract`` pause, or its ``in_place`` one when *clear_cache* is
        false (vLLM's keep: None means true). ``abort``: close the pause gate only, whatever
        *clear_cache* says (SGLang's ``/flush_cache`` is separate)."""
        async with self._scheduler_state:
            if mode == "keep":
                if self._scheduler_pause is None:
                    # Requests aborted while running make it a retract pause (Tracker.native_pause).
                    await self.sglang.pause_generation("retract" if clear_cache is not False else "in_place")
                return
            if self._scheduler_pause is not None:
                # Coming from keep: the scheduler must run for the control's abort to return.
                await self.sglang.continue_generation()
            await self.sglang.close_pause_gate()

    async def drain(self, clear_cache: Optional[bool] = None) -> list[InFlight]:
        """SGLang has no drain: close the TokenizerManager's pause gate (the scheduler runs on),
        and return every request past it.

        A request's state is created, and the gate checked, with no await in between
        (``generate_request``), so when the gate closes on an open gate every request in the
        registry is past it and will run to its end; those arriving later wait at the gate.
        Coming from another pause, the requests held at the gate stay there: only the
        dispatched ones are returned.
        """
        async with self._scheduler_state:
            gate_was_open = self._scheduler_pause is None and not self.sglang.pause_gate_closed()
            if self._scheduler_pause is not None:
                # Coming from keep: the scheduler must run for the admitted requests to finish.
                await self.sglang.continue_generation()
            await self.sglang.close_pause_gate()
            entries = self.registry.select()
        return entries if gate_was_open else [e for e in entries if e.dispatched]

    async def resume(self) -> None:
        """SGLang's ``continue_generation``: opens the gate and restarts the scheduler."""
        async with self._scheduler_state:
            await self.sglang.continue_generation()

    async def pause_scheduler(self, mode: str) -> None:
        """SGLang's own ``in_place`` or ``retract`` pause (its ``/pause_generation``), under the
        lock that orders every change of the scheduler's pause state."""
        async with self._scheduler_state:
            await self.sglang.pause_generation(mode)

    def engine_pause(self) -> EnginePause:
        """Paused while the pause gate is closed or the scheduler paused, whoever did it; a
        paused scheduler is the contract's ``keep``, a closed gate alone its ``abort``."""
        if self._scheduler_pause is not None:
            return EnginePause(True, "keep")
        closed = self.sglang.pause_gate_closed()
        return EnginePause(closed, "abort" if closed else None)


def _apply_chunk(out: Generation, chunk: dict, incremental: bool) -> None:
    """Fold one SGLang stream chunk into the cumulative snapshot *out*.

    Token ids are read from ``output_token_logprobs`` entries ``(logprob, token_id, text)``, so
    ids and logprobs always pair up. Non-incremental chunks hold every token so far (they share
    SGLang's lists), so only the new tail is copied. With ``--incremental-streaming-output``
    chunks are deltas, except SGLang's answer for a request aborted in its waiting queue, which
    holds all of them and, unlike every other chunk, no ``prompt_tokens``.
    """
    meta = chunk.get("meta_info", {})
    logprobs = meta.get("output_token_logprobs") or []
    cumulative = not incremental or "prompt_tokens" not in meta
    new = logprobs[len(out.output_logprobs) :] if cumulative else logprobs
    for item in new:
        out.output_logprobs.append(float(item[0]))
        out.output_ids.append(int(item[1]))
    if "cached_tokens" in meta:
        out.cached_tokens = int(meta["cached_tokens"])
    finish = meta.get("finish_reason")
    if finish is not None:
        kind = finish.get("type") if isinstance(finish, dict) else str(finish)
        out.finish_reason = _FINISH.get(kind, "stop")
        spans = meta.get("weight_versions") or []
        out.weight_versions = [WeightVersionSpan(version=s["version"], start=s["start"], end=s["end"]) for s in spans]
