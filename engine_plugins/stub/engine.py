"""The stub engine: requests generate one pseudo-random token every ``step_s`` seconds.

It behaves as a well-behaved engine should: requests are held while tokenizing and while
paused, an abort reaches a request wherever it is, ``keep`` freezes running requests, and the
weight version in force is recorded for every token.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import zlib
from typing import AsyncIterator, Optional, Sequence

from ..model_limits import ModelLimits
from ..registry import InFlight, InFlightRegistry
from ..schema import SamplingParams, WeightVersionSpan
from ..seam import EnginePause, Generation

EOS_TOKEN_ID = 2


class StubEngine:
    """An in-process engine implementing :class:`~engine_plugins.seam.EngineSeam`.

    ``step_s``: seconds per decode step. ``tokenize_s``: seconds a request spends "tokenizing"
    before it can be dispatched. ``release_delay_s``: how long an aborted request takes to
    release (a slow engine, for abort-with-wait time-outs). ``api_key``: the engine's own key.
    ``vocab_size``, ``context_length``: the "model's" limits (a long context by default: the stub
    has no model, and tests run requests that never end on their own).
    """

    engine = "stub"

    def __init__(
        self,
        step_s: float = 0.002,
        tokenize_s: float = 0.0,
        release_delay_s: float = 0.0,
        vocab_size: int = 512,
        api_key: Optional[str] = None,
        context_length: int = 1_000_000,
    ) -> None:
        self.registry = InFlightRegistry()
        self.step_s = step_s
        self.tokenize_s = tokenize_s
        self.release_delay_s = release_delay_s
        self.vocab_size = vocab_size
        self.context_length = context_length
        self._api_key = api_key
        self._version = "default"
        self._paused: Optional[str] = None
        self._changed = asyncio.Event()

    def _notify(self) -> None:
        # Wake every request waiting for a pause, resume or abort; the next change gets a new event.
        self._changed.set()
        self._changed = asyncio.Event()

    def ready(self) -> bool:
        """Always ready."""
        return True

    def model_limits(self) -> ModelLimits:
        """The stub's vocabulary and context length."""
        return ModelLimits(self.vocab_size, self.context_length)

    def api_keys(self) -> list[str]:
        """The stub's own key, if it was given one."""
        return [self._api_key] if self._api_key else []

    async def generate(self, rid: str, input_ids: list[int], params: SamplingParams) -> AsyncIterator[Generation]:
        """Generate pseudo-random tokens (seeded by ``params.seed`` or the id); never EOS."""
        entry = self.registry.add(rid)
        try:
            await self._tokenize(entry)
            while self._paused and not entry.aborted:
                await self._changed.wait()
            if entry.aborted:
                yield Generation(finish_reason="abort")
                return
            entry.dispatched = True
            async for generation in self._decode(entry, params):
                yield generation
        finally:
            self.registry.release(rid)

    async def _tokenize(self, entry: InFlight) -> None:
        # Takes tokenize_s, unless an abort comes first.
        loop = asyncio.get_running_loop()
        end = loop.time() + self.tokenize_s
        while not entry.aborted and loop.time() < end:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), end - loop.time())

    async def _decode(self, entry: InFlight, params: SamplingParams) -> AsyncIterator[Generation]:
        seed = params.seed if params.seed is not None else zlib.crc32(entry.rid.encode())
        rng = random.Random(seed)
        out = Generation()
        while True:
            if entry.aborted:
                if self.release_delay_s:
                    await asyncio.sleep(self.release_delay_s)
                out.finish_reason = "abort"
                yield out
                return
            if self._paused == "keep":
                await self._changed.wait()
                continue
            await asyncio.sleep(self.step_s)
            if entry.aborted or self._paused == "keep":
                continue
            token = rng.randrange(EOS_TOKEN_ID + 1, self.vocab_size)
            out.output_ids.append(token)
            out.output_logprobs.append(-5.0 * rng.random())
            _extend_spans(out.weight_versions, self._version, len(out.output_ids))
            if token in params.stop_token_ids:
                out.finish_reason = "stop"
            elif len(out.output_ids) >= params.max_new_tokens:
                out.finish_reason = "length"
            yield out
            if out.finish_reason:
                return

    async def abort(self, entries: Sequence[InFlight]) -> None:
        """Aborted entries notice at their next step or wherever they wait."""
        self._notify()

    async def rank_loads(self) -> list[dict]:
        """Running = dispatched, waiting = held; one rank."""
        held = self.registry.held()
        return [{"dp_rank": 0, "num_running_reqs": len(self.registry) - held, "num_waiting_reqs": held}]

    def weight_version(self) -> str:
        """The version stamped on new tokens."""
        return self._version

    def engine_version(self) -> str:
        """The stub is part of this package: its version."""
        from .. import __version__

        return f"engine-plugins-stub {__version__}"

    def loads_header(self) -> dict:
        """The stub has no engine fields of its own."""
        return {}

    async def set_weight_version(self, version: str) -> None:
        """Later tokens carry *version*."""
        self._version = version

    async def pause(self, mode: str, clear_cache: Optional[bool] = None) -> None:
        """Hold new requests; in ``keep`` mode also freeze running ones (the stub has no caches)."""
        self._paused = mode
        self._notify()

    async def drain(self, clear_cache: Optional[bool] = None) -> list[InFlight]:
        """Hold new requests (and those still tokenizing); the dispatched ones run on."""
        self._paused = "wait"
        self._notify()
        return [e for e in self.registry.select() if e.dispatched]

    async def resume(self) -> None:
        """Release held and frozen requests."""
        self._paused = None
        self._notify()

    def engine_pause(self) -> EnginePause:
        """The stub's own pause state."""
        return EnginePause(self._paused is not None, "abort" if self._paused == "wait" else self._paused)


def _extend_spans(spans: list[WeightVersionSpan], version: str, n_tokens: int) -> None:
    if spans and spans[-1].version == version:
        spans[-1].end = n_tokens
    else:
        spans.append(WeightVersionSpan(version=version, start=n_tokens - 1, end=n_tokens))
