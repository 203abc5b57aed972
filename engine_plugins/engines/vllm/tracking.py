"""Keeps the in-flight registry exact on vLLM's ``AsyncLLM``, for requests on every route.

Every request any route sends through the engine client's ``generate`` enters the registry when
its generator starts (before tokenizing) and leaves it when the generator ends. The internal ids
the engine core knows it by are recorded once ``add_request_async`` has sent it; an abort that
covered the request before then is sent right after (the fence), so an abort always follows the
request to the engine core and never precedes it on the wire.

vLLM has no registry of method hooks: the entry points are replaced on the engine client's
instances (:meth:`~.facade.VllmEngine.wrap_entry_points`), and put back by
:meth:`Tracker.uninstall`. The vLLM behaviour this relies on is in ``docs/engine-notes.md``
("vLLM").
"""

from __future__ import annotations

import itertools
from contextvars import ContextVar
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, Sequence

from engine_plugins.core.cache_scope import version_salt
from engine_plugins.core.registry import InFlight, InFlightRegistry
from engine_plugins.engines.vllm.facade import VllmEngine

# The registry entry of the generate() call that is adding requests in this task. Set around the
# first step of the generator, which is when AsyncLLM tokenizes and adds; tasks started from
# there (streaming inputs) inherit it, as they should.
_ADDING: ContextVar[Optional[InFlight]] = ContextVar("engine_plugins_vllm_adding", default=None)


class Tracker:
    """The registry of one engine client, fed by its wrapped entry points."""

    def __init__(self, vllm: VllmEngine, weight_version: str = "default", scope_prefix_cache: bool = True,
                 bump: Optional[Callable[[str], Awaitable[Any]]] = None) -> None:
        self.vllm = vllm
        self.bump = bump
        """The contract's bump, which a version set through vLLM's own routes becomes (None: kept as vLLM set it)."""
        self.registry = InFlightRegistry()
        self.scope_prefix_cache = scope_prefix_cache
        """Salt each request's prefix cache by the version it was admitted under (:mod:`..cache_scope`)."""
        self.weight_version = weight_version
        """The version last set through this engine client, by any route."""
        # Internal ids sent to the engine core, per entry; only ids whose add has been sent.
        self._internal: dict[InFlight, list[str]] = {}
        # Registry keys with a running generate(): a second request with the same external id
        # (vLLM allows them) gets a key of its own.
        self._claimed: set[str] = set()
        # Running generate() calls per external id, so that the last one to end is known without
        # a scan of every key (an abort of n requests ends n generators at once).
        self._running: dict[str, int] = {}
        self._duplicates = itertools.count(1)
        self._restore: Optional[Callable[[], None]] = None

    def install(self) -> None:
        """Start tracking every request of this engine client."""
        self._restore = self.vllm.wrap_entry_points(self._tracked_generate, self._tracked_add, self._version_set,
                                                    self.registry.weights_loaded, self.bump)

    def uninstall(self) -> None:
        """Stop tracking (tests)."""
        if self._restore is not None:
            self._restore()
            self._restore = None

    def internal_ids(self, entries: Sequence[InFlight]) -> list[str]:
        """The engine core's ids of *entries*, for those already sent to it."""
        return [rid for entry in entries for rid in self._internal.get(entry, ())]

    def _tracked_generate(self, original: Callable, prompt: Any, sampling_params: Any, request_id: str, *args: Any, **kwargs: Any):
        return self._track(request_id, lambda: original(prompt, sampling_params, request_id, *args, **kwargs))

    async def _track(self, request_id: str, start: Callable[[], Any]) -> AsyncIterator[Any]:
        entry = self.registry.get(request_id)
        if entry is None or entry.rid in self._claimed:
            key = request_id if entry is None else f"{request_id}#dup{next(self._duplicates)}"
            entry = self.registry.add(key, request_id)
        self._claimed.add(entry.rid)
        self._running[request_id] = self._running.get(request_id, 0) + 1
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
            # Closing the inner generator early makes vLLM abort the request.
            await outputs.aclose()
            self._claimed.discard(entry.rid)
            left = self._running[request_id] - 1
            if left:
                self._running[request_id] = left
            else:
                del self._running[request_id]
                self.vllm.forget_request(request_id)
            self._internal.pop(entry, None)
            # In the task that ran the generation, a few loop steps before the route writes the
            # answer; an abort with wait waits for that write too (:mod:`..delivery`).
            self.registry.release(entry.rid)

    async def _tracked_add(self, original: Callable, request: Any) -> None:
        entry = _ADDING.get()
        if entry is not None and self.scope_prefix_cache:
            # The last point before the engine core hashes the prompt's blocks; every route's
            # requests (and each of an n > 1 request's children) pass here.
            self.vllm.set_cache_salt(request, version_salt(self.vllm.cache_salt(request), entry.admitted, entry.admitted_version,
                                                             entry.admitted_loads))
        await original(request)
        if entry is None:
            return  # not from generate() (e.g. a pre-aborted KV-transfer notice): not a request
        internal_id = self.vllm.internal_request_id(request)
        self._internal.setdefault(entry, []).append(internal_id)
        entry.dispatched = True
        if entry.aborted:
            # Covered by an abort before the engine core knew it: abort it now, after the add.
            await self.vllm.abort_internal([internal_id])

    def _version_set(self, version: str) -> None:
        self.weight_version = version
