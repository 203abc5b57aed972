"""The contract's seam on vLLM's ``AsyncLLM``: registry, fence, abort, loads, versions, pause.

Every request any route sends through ``AsyncLLM.generate`` enters the registry when its
generator starts (before tokenizing) and leaves it when the generator ends. The internal ids the
engine core knows it by are recorded when ``add_request_async`` has sent it; an abort that
covered the request before then is sent right after (the fence), so an abort always follows
the request to the engine core and never precedes it on the wire.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from contextvars import ContextVar
from typing import Any, AsyncIterator, Callable, Optional, Sequence

from ..errors import ContractError
from ..registry import InFlight, InFlightRegistry
from ..schema import SamplingParams, WeightVersionSpan
from ..seam import Generation
from . import internals
from .internals import VllmApi

# Under "vllm." so that vLLM's own log handler (configured for the "vllm" logger) prints it.
logger = logging.getLogger("vllm." + __name__)

# The registry entry of the generate() call that is adding requests in this task. Set around the
# first step of the generator, which is when AsyncLLM tokenizes and adds (async_llm.py:743-759);
# tasks started from there (streaming inputs, async_llm.py:674) inherit it, as they should.
_ADDING: ContextVar[Optional[InFlight]] = ContextVar("engine_plugins_vllm_adding", default=None)

# vLLM finish reasons (v1/engine/__init__.py:36-69) in the contract's terms; "error" raises.
_FINISH = {"stop": "stop", "length": "length", "abort": "abort", "repetition": "stop"}


class VllmSeam:
    """:class:`~engine_plugins.seam.EngineSeam` over one ``AsyncLLM`` (one API server process)."""

    engine = "vllm"

    def __init__(self, llm: Any, api: VllmApi, api_keys: Sequence[str] = (), weight_version: str = "default") -> None:
        self.registry = InFlightRegistry()
        self._llm = llm
        self._api = api
        self._keys = list(api_keys)
        self._version = weight_version
        # Internal ids sent to the engine core, per entry; only ids whose add has been sent.
        self._internal: dict[InFlight, list[str]] = {}
        # Registry keys with a running generate(): a second request with the same external id
        # (vLLM allows them) gets a key of its own.
        self._claimed: set[str] = set()
        self._duplicates = itertools.count(1)
        self._restore: Optional[Callable[[], None]] = None

    # --- installation -----------------------------------------------------------------

    def install(self) -> None:
        """Start tracking every request of this engine client."""
        self._restore = internals.wrap_entry_points(
            self._llm, self._tracked_generate, self._tracked_add, self._version_set
        )

    def uninstall(self) -> None:
        """Stop tracking (tests)."""
        if self._restore is not None:
            self._restore()
            self._restore = None

    def _tracked_generate(self, original: Callable, prompt: Any, sampling_params: Any, request_id: str, *args: Any, **kwargs: Any):
        return self._track(request_id, lambda: original(prompt, sampling_params, request_id, *args, **kwargs))

    async def _track(self, request_id: str, start: Callable[[], Any]) -> AsyncIterator[Any]:
        entry = self.registry.get(request_id)
        if entry is None or entry.rid in self._claimed:
            key = request_id if entry is None else f"{request_id}#dup{next(self._duplicates)}"
            entry = self.registry.add(key, request_id)
        self._claimed.add(entry.rid)
        outputs = start()
        try:
            token = _ADDING.set(entry)
            try:
                first = await outputs.__anext__()
            except StopAsyncIteration:
                return
            finally:
                _ADDING.reset(token)
            yield first
            async for output in outputs:
                yield output
        finally:
            # Closing the inner generator early makes vLLM abort the request (async_llm.py:779-781).
            await outputs.aclose()
            self._claimed.discard(entry.rid)
            self._internal.pop(entry, None)
            self.registry.release(entry.rid)

    async def _tracked_add(self, original: Callable, request: Any) -> None:
        entry = _ADDING.get()
        await original(request)
        if entry is None:
            return  # not from generate() (e.g. a pre-aborted KV-transfer notice): not a request
        self._internal.setdefault(entry, []).append(internals.internal_request_id(request))
        entry.dispatched = True
        if entry.aborted:
            # Covered by an abort before the engine core knew it: abort it now, after the add.
            await internals.abort_internal(self._llm, [internals.internal_request_id(request)])

    # --- EngineSeam ---------------------------------------------------------------------

    def ready(self) -> bool:
        """False once the engine core has died."""
        return not self._llm.errored

    def api_keys(self) -> list[str]:
        """vLLM's own ``--api-key`` values (or ``VLLM_API_KEY``)."""
        return list(self._keys)

    async def generate(self, rid: str, input_ids: list[int], params: SamplingParams) -> AsyncIterator[Generation]:
        """Generate on ``AsyncLLM.generate`` with engine id *rid*; one cumulative snapshot at the end."""
        try:
            sampling = self._api.SamplingParams(**self._sampling_kwargs(params))
            # Rendering first avoids the deprecated raw-prompt path (input_processor.py:402-412).
            (engine_input,) = await self._llm.renderer.render_cmpl_async([self._api.TokensPrompt(prompt_token_ids=input_ids)])
        except self._api.client_errors as exc:
            raise ContractError(400, f"vLLM refused the request: {exc}") from None
        outputs = self._llm.generate(engine_input, sampling, request_id=rid)
        async with contextlib.aclosing(outputs):
            try:
                async for output in outputs:
                    yield self._snapshot(output)
            except self._api.client_errors as exc:
                raise ContractError(400, f"vLLM refused the request: {exc}") from None

    def _sampling_kwargs(self, params: SamplingParams) -> dict:
        return dict(
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=0 if params.top_k == -1 else params.top_k,  # vLLM: 0 disables (sampling_params.py:678-680)
            stop_token_ids=list(params.stop_token_ids),
            ignore_eos=params.ignore_eos,
            seed=params.seed,
            logprobs=0,  # the sampled token's logprob only (sampling_params.py:339-346)
            # Token ids in, token ids out: no per-step detokenizing in the API process (375).
            detokenize=False,
            output_kind=self._api.final_only,
        )

    @staticmethod
    def _snapshot(output: Any) -> Generation:
        completion = output.outputs[0]
        tokens = list(completion.token_ids)
        logprobs = completion.logprobs or []
        # The sampled token is always among a position's logprobs (FlatLogprobs indexes the same way).
        values = [float(logprobs[i][token].logprob) for i, token in enumerate(tokens)]
        finish = completion.finish_reason
        if finish is not None and finish not in _FINISH:
            raise RuntimeError(f"vLLM finished the request with {finish!r}")
        spans = [WeightVersionSpan(version=s.version, start=s.start, end=s.end) for s in (completion.weight_versions or [])]
        return Generation(
            output_ids=tokens,
            output_logprobs=values,
            finish_reason=_FINISH.get(finish) if finish else None,
            weight_versions=spans,
        )

    async def abort(self, entries: Sequence[InFlight]) -> None:
        """Abort the engine-core requests of *entries*; those not sent yet are aborted once sent."""
        ids = [rid for entry in entries for rid in self._internal.get(entry, ())]
        if ids:
            await internals.abort_internal(self._llm, ids)

    async def rank_loads(self) -> list[dict]:
        """Exact running and waiting counts from each engine core's scheduler."""
        counts = await internals.request_counts(self._llm)
        return [
            {"dp_rank": rank, "num_running_reqs": running, "num_waiting_reqs": waiting}
            for rank, (running, waiting) in enumerate(counts)
        ]

    def weight_version(self) -> str:
        """The version the engine core stamps on new tokens, as last set through this engine client."""
        return self._version

    async def set_weight_version(self, version: str) -> None:
        """``AsyncLLM.update_weight_version``: later tokens carry *version*; nothing is aborted."""
        await self._llm.update_weight_version(version)

    def _version_set(self, version: str) -> None:
        self._version = version

    async def pause(self, mode: str) -> None:
        """``keep``: vLLM's keep (PAUSED_ALL: running requests freeze, new ones queue).
        ``abort``: vLLM's abort (the engine core aborts what it holds, new requests queue);
        the control then aborts every accepted request, which covers the rest."""
        if mode == "keep":
            # Keep the KV cache: the frozen requests go on from it after resume.
            await self._llm.pause_generation(mode="keep", clear_cache=False)
        else:
            await self._llm.pause_generation(mode="abort", clear_cache=True)

    async def resume(self) -> None:
        """``AsyncLLM.resume_generation``: queued and frozen requests go on."""
        await self._llm.resume_generation()
