"""The stub engine: requests generate pseudo-random tokens, the first at dispatch (the prefill),
then one every ``step_s`` seconds.

It behaves as a well-behaved engine should: requests are held while tokenizing and while
paused, an abort reaches a request wherever it is, ``keep`` freezes running requests, and the
weight version in force is recorded for every token.

It has a prefix cache as vLLM's works (:class:`PrefixCache`): blocks of 16 prompt tokens,
hashed in a chain with the request's salt in the first block's hash, so that requests with
different salts share nothing; a hit counts whole blocks only and leaves at least one prompt
token to compute. Each request's salt is that of the weight-version generation it was admitted
under (:func:`~engine_plugins.core.cache_scope.version_salt`) unless scoping is off, and every
snapshot reports the request's hit as ``cached_tokens``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import zlib
from collections import OrderedDict
from typing import AsyncIterator, Optional, Sequence

from engine_plugins.core.cache_scope import version_salt
from engine_plugins.core.model_limits import ModelLimits
from engine_plugins.core.registry import InFlight, InFlightRegistry
from engine_plugins.contract.schema import SamplingParams, WeightVersionSpan
from engine_plugins.core.seam import EnginePause, Generation

EOS_TOKEN_ID = 2
BLOCK_SIZE = 16


class PrefixCache:
    """Full blocks of *block_size* prompt tokens by chained hash, the salt in the first block's
    (as vLLM's ``hash_block_tokens`` and its ``cache_salt``); at most *max_blocks* of them, the
    least recently used evicted first."""

    def __init__(self, block_size: int = BLOCK_SIZE, max_blocks: int = 4096) -> None:
        self.block_size = block_size
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def _hashes(self, input_ids: Sequence[int], salt: Optional[str]) -> list[int]:
        hashes, parent = [], None
        for start in range(0, len(input_ids) - self.block_size + 1, self.block_size):
            parent = hash((parent, tuple(input_ids[start : start + self.block_size]), salt if start == 0 else None))
            hashes.append(parent)
        return hashes

    def admit(self, input_ids: Sequence[int], salt: Optional[str]) -> int:
        """The prompt tokens of *input_ids* already cached under *salt* (whole blocks, at most
        all but the last token, which a real engine recomputes for its logits); then its full
        blocks are cached."""
        hashes = self._hashes(input_ids, salt)
        hit = 0
        for block_hash in hashes[: max(len(input_ids) - 1, 0) // self.block_size]:
            if block_hash not in self._blocks:
                break  # chained: no later block can hit either
            hit += 1
        for block_hash in hashes:
            self._blocks[block_hash] = None
            self._blocks.move_to_end(block_hash)
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)
        return hit * self.block_size

    def clear(self) -> None:
        """Forget every cached block (vLLM's ``reset_prefix_cache``)."""
        self._blocks.clear()


class StubEngine:
    """An in-process engine implementing :class:`~engine_plugins.core.seam.EngineSeam`.

    ``step_s``: seconds per decode step. ``tokenize_s``: seconds a request spends "tokenizing"
    before it can be dispatched. ``release_delay_s``: how long an aborted request takes to
    release (a slow engine, for abort-with-wait time-outs). ``api_key``: the engine's own key.
    ``vocab_size``, ``context_length``: the "model's" limits (a long context by default: the stub
    has no model, and tests run requests that never end on their own). ``scope_prefix_cache``:
    whether each request's prefix cache is scoped by the weight version it was admitted under
    (``ENGINE_PLUGINS_SCOPE_PREFIX_CACHE`` for a served stub).
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
        scope_prefix_cache: bool = True,
    ) -> None:
        self.registry = InFlightRegistry()
        self.step_s = step_s
        self.tokenize_s = tokenize_s
        self.release_delay_s = release_delay_s
        self.vocab_size = vocab_size
        self.context_length = context_length
        self._api_key = api_key
        self.scope_prefix_cache = scope_prefix_cache
        self.prefix_cache = PrefixCache()
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
        """Generate pseudo-random tokens (seeded by ``params.seed``; else, greedy, by the prompt, so
        that a greedy request repeats as on an engine; else by the id); never EOS."""
        entry = self.registry.add(rid)
        try:
            await self._tokenize(entry)
            while self._paused and not entry.aborted:
                await self._changed.wait()
            if entry.aborted:
                yield Generation(finish_reason="abort", cached_tokens=0)
                return
            entry.dispatched = True
            salt = version_salt(None, entry.admitted, entry.admitted_version, entry.admitted_loads) if self.scope_prefix_cache else None
            cached_tokens = self.prefix_cache.admit(input_ids, salt)
            async for generation in self._decode(entry, params, cached_tokens, input_ids):
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

    async def _decode(self, entry: InFlight, params: SamplingParams, cached_tokens: int, input_ids: list[int]) -> AsyncIterator[Generation]:
        if params.seed is not None:
            seed = params.seed
        elif params.temperature == 0:
            seed = zlib.crc32(repr(input_ids).encode())
        else:
            seed = zlib.crc32(entry.rid.encode())
        rng = random.Random(seed)
        out = Generation(cached_tokens=cached_tokens)
        # The first token comes with the prefill, in the turn that dispatched the request (as an
        # engine's prefill pass yields it): a request seen running has a token to salvage.
        prefill = True
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
            if not prefill:
                await asyncio.sleep(self.step_s)
            prefill = False
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
        from engine_plugins import __version__

        return f"engine-plugins-stub {__version__}"

    def loads_header(self) -> dict:
        """The stub has no engine fields of its own."""
        return {}

    async def set_weight_version(self, version: str) -> None:
        """Later tokens carry *version*."""
        self._version = version

    async def pause(self, mode: str, clear_cache: Optional[bool] = None) -> None:
        """Hold new requests; in ``keep`` mode also freeze running ones and, unless *clear_cache*
        is false, clear the prefix cache as vLLM's keep does (the stub keeps no other KV)."""
        if mode == "keep" and clear_cache is not False:
            self.prefix_cache.clear()
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
