"""The in-flight registry: every request the server has accepted and not yet released.

Engine adapters add a request the moment the engine accepts it (before tokenizing, before any
pause gate) and finish it when the engine has released it. That makes ``in_flight`` exact, lets
an abort-all cover requests the scheduler has not seen yet (the fence), and lets an abort wait
for exactly the requests it covers: each entry has its own event, so waiting costs nothing
while requests run and ends as soon as the last covered request is released and its client
has its answer (:mod:`engine_plugins.core.delivery`: an engine releases a request before its answer
is written).

Each entry also records the weight-version generation it was admitted under (the registry's
``generation`` when it was added, which the control advances at every bump; see
:mod:`engine_plugins.core.versions`), so that aborts can select requests by age.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Iterable, Optional

from engine_plugins.core import delivery
from engine_plugins.core.delivery import Delivery


@dataclass(eq=False)
class InFlight:
    """One accepted request.

    ``rid`` is the engine's id, ``request_id`` the id a client aborts it by (the same for the
    engine's own routes; a client id mapped to a unique engine id for ``/partial_generate``).
    ``dispatched`` is false while the engine holds the request before its scheduler (still
    tokenizing, or at a pause gate). ``aborted`` is set by an abort that covered it, so that an
    adapter can abort it again once it reaches the scheduler; ``abort_reason`` is that abort's
    reason (the abort hook's: ``"request"``, ``"stale"``, ``"pause"``, ...).

    ``admitted`` is the weight-version generation in force when the engine accepted it, and
    ``admitted_version`` that version's name; ``admitted_loads`` the count of weight loads by then
    (an engine's update that names no version still changes the weights).
    ``max_staleness``: abort it once that many bumps have happened since (None: never).
    ``delivery``: the answer of the HTTP request that made it (None outside one), recorded when
    the entry is added.
    """

    rid: str
    request_id: str
    dispatched: bool = False
    aborted: bool = False
    admitted: int = 0
    admitted_version: str = ""
    admitted_loads: int = 0
    max_staleness: Optional[int] = None
    abort_reason: Optional[str] = None
    delivery: Optional[Delivery] = field(default=None, repr=False, compare=False)
    released: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _registry: Optional["InFlightRegistry"] = field(default=None, repr=False, compare=False)

    def __setattr__(self, name: str, value: object) -> None:
        # Adapters set ``dispatched`` directly; the registry keeps its count of held entries
        # in step, so that a load reading costs the same with ten or ten thousand in flight.
        if name == "dispatched":
            registry = self.__dict__.get("_registry")
            if registry is not None and bool(value) != bool(self.__dict__.get("dispatched")):
                registry._held += -1 if value else 1
        object.__setattr__(self, name, value)


class InFlightRegistry:
    """Requests accepted and not released, by engine id. Used from the engine's event loop only."""

    def __init__(self) -> None:
        self._by_rid: dict[str, InFlight] = {}
        # Client id -> its entries by engine id, so that refusing a duplicate id and aborting by
        # id cost the same with ten or ten thousand requests in flight.
        self._by_request_id: dict[str, dict[str, InFlight]] = {}
        # Counts kept as entries come and go (and are dispatched), for the same reason.
        self._held = 0
        self._by_generation: dict[int, int] = {}
        self.generation = 0
        """The weight-version generation new entries are admitted under (set by the control)."""
        self.version = ""
        """The name of that version (set by the control with the generation)."""
        self.weight_loads = 0
        """Weight loads so far (:meth:`weights_loaded`): with the generation, the prefix-cache scope."""
        # Released requests whose answers are still being written (each leaves once written).
        self._answering: set[Delivery] = set()

    def __len__(self) -> int:
        return len(self._by_rid)

    def add(self, rid: str, request_id: Optional[str] = None, dispatched: bool = False) -> InFlight:
        """Record a request the engine has just accepted; an existing entry for *rid* is kept."""
        entry = self._by_rid.get(rid)
        if entry is None:
            entry = InFlight(rid=rid, request_id=request_id or rid, dispatched=dispatched, admitted=self.generation,
                             admitted_version=self.version, admitted_loads=self.weight_loads)
            # Read here, in the task of the HTTP request that made it: every engine adds a
            # request there (SGLang when it creates the request's state, vLLM in generate()).
            entry.delivery = delivery.current()
            if entry.delivery is not None:
                entry.delivery.open += 1
            self._by_rid[rid] = entry
            self._by_request_id.setdefault(entry.request_id, {})[rid] = entry
            self._held += not dispatched
            self._by_generation[entry.admitted] = self._by_generation.get(entry.admitted, 0) + 1
            entry._registry = self
        return entry

    def admit_under(self, generation: int, version: str) -> None:
        """Admit new entries under weight-version *generation*, named *version*."""
        self.generation, self.version = generation, version

    def weights_loaded(self) -> None:
        """New weights are in the engine: entries added from now on share no prefix cache with
        the earlier ones, even when no version bump names the weights."""
        self.weight_loads += 1

    def get(self, rid: str) -> Optional[InFlight]:
        """The entry for engine id *rid*, if it is in flight."""
        return self._by_rid.get(rid)

    def release(self, rid: str) -> None:
        """The engine has finished with *rid* and freed its state; wake anyone waiting on it."""
        entry = self._by_rid.pop(rid, None)
        if entry is not None:
            same_id = self._by_request_id.get(entry.request_id)
            if same_id is not None:
                same_id.pop(rid, None)
                if not same_id:
                    del self._by_request_id[entry.request_id]
            entry._registry = None
            if entry.delivery is not None:
                entry.delivery.open -= 1
                if not entry.delivery.open:
                    entry.delivery.list_in(self._answering)
            self._held -= not entry.dispatched
            left = self._by_generation[entry.admitted] - 1
            if left:
                self._by_generation[entry.admitted] = left
            else:
                del self._by_generation[entry.admitted]
            entry.released.set()

    def held(self) -> int:
        """How many requests are accepted but not yet dispatched to the scheduler."""
        return self._held

    def has_request_id(self, request_id: str) -> bool:
        """Whether a request with this client id is in flight."""
        return request_id in self._by_request_id

    def select(self, request_ids: Optional[Iterable[str]] = None) -> list[InFlight]:
        """Entries whose client id is exactly one of *request_ids* (all entries for None)."""
        if request_ids is None:
            return list(self._by_rid.values())
        entries: list[InFlight] = []
        for request_id in dict.fromkeys(request_ids):
            entries.extend(self._by_request_id.get(request_id, {}).values())
        return entries

    def admitted_before(self, generation: int) -> list[InFlight]:
        """Entries admitted under a generation older than *generation*."""
        return [e for e in self._by_rid.values() if e.admitted < generation]

    def by_admission(self) -> dict[int, int]:
        """How many entries were admitted under each generation, oldest first."""
        return dict(sorted(self._by_generation.items()))

    async def wait_released(
        self, entries: Iterable[InFlight], timeout_s: float, everything: bool = False, delivery_bound_s: float = delivery.DELIVERY_BOUND_S
    ) -> bool:
        """Wait until every entry is released and its client has its answer; False if *timeout_s*
        passed before every entry was released.

        *everything*: the caller covers every request (an abort of all, a pause in ``abort``
        mode), so the answers of requests released just before, still being written, are waited
        for too: an engine may end its requests itself first (vLLM's abort-mode pause).

        The answers are waited for within what is left of *timeout_s*, and at most
        *delivery_bound_s*: a client that stops reading is not the engine failing to stop, so it
        does not make this False (see :func:`~engine_plugins.core.delivery.wait_delivered`).
        """
        entries = list(entries)
        answering = list(self._answering) if everything else []
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        pending = [asyncio.ensure_future(e.released.wait()) for e in entries if not e.released.is_set()]
        if pending:
            _, not_done = await asyncio.wait(pending, timeout=timeout_s)
            for waiter in not_done:
                waiter.cancel()
            if not_done:
                return False
        await delivery.wait_delivered([*(e.delivery for e in entries), *answering], min(delivery_bound_s, end - loop.time()))
        return True
