"""The narrow seam between the engine-neutral control logic and one engine.

Each engine adapter (SGLang, vLLM, the stub) implements :class:`EngineSeam`; everything it needs
from the engine's internals stays behind it. The adapter also keeps the shared
:class:`~engine_plugins.core.registry.InFlightRegistry` exact: it adds every request the engine
accepts (on any route, not only the contract's), marks it dispatched when it reaches the
scheduler, and releases it when the engine has freed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator, Optional, Protocol, Sequence

from engine_plugins.core.model_limits import ModelLimits
from engine_plugins.core.registry import InFlight, InFlightRegistry
from engine_plugins.contract.schema import SamplingParams, WeightVersionSpan


@dataclass
class Generation:
    """A cumulative snapshot of one request's output: every token so far, not a delta.

    ``finish_reason`` is None while the request runs, then ``"stop"``, ``"length"`` or
    ``"abort"``. ``weight_versions`` are the engine's spans over ``output_ids`` when the engine
    reports them (usually on the last snapshot only); empty otherwise.
    """

    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    finish_reason: Optional[str] = None
    weight_versions: list[WeightVersionSpan] = field(default_factory=list)
    cached_tokens: Optional[int] = None
    """Prompt tokens the engine served from its prefix cache (its own count); None where the
    engine reports none."""


@dataclass(frozen=True)
class EnginePause:
    """A pause as the engine itself reports it: whether it is paused, and the contract's mode
    closest to the engine's (``keep`` for a frozen scheduler, ``abort`` for held admission)."""

    paused: bool
    mode: Optional[str] = None


class EngineSeam(Protocol):
    """What the control logic needs from an engine. All methods run on the engine's event loop."""

    engine: str
    """Engine name reported by ``/v1/loads``: ``"sglang"``, ``"vllm"`` or ``"stub"``."""
    registry: InFlightRegistry

    def ready(self) -> bool:
        """Whether the engine can serve now (False answers 503)."""

    def model_limits(self) -> ModelLimits:
        """The served model's vocabulary size and context length, as the engine knows them."""

    def generate(self, rid: str, input_ids: list[int], params: SamplingParams) -> AsyncIterator[Generation]:
        """Generate for engine id *rid*, yielding cumulative snapshots; the last one is final.

        An abort of *rid* ends the stream with ``finish_reason="abort"`` and every token
        generated so far. Closing the iterator early aborts the request in the engine.
        """

    async def abort(self, entries: Sequence[InFlight]) -> None:
        """Abort exactly these requests, wherever they are: tokenizing, held, queued or running.

        Entries arrive with ``aborted`` set; a request the scheduler has not seen yet must be
        aborted when it gets there. Returns once the aborts are sent, not when they complete.
        """

    async def rank_loads(self) -> list[dict]:
        """The engine's own per-rank figures: dicts with ``dp_rank``, ``num_running_reqs``,
        ``num_waiting_reqs`` and any engine-specific fields to pass through."""

    def weight_version(self) -> str:
        """The engine's current weight version."""

    def engine_version(self) -> str:
        """The installed engine's own version string (``/v1/loads`` reports it as ``version``)."""

    def loads_header(self) -> dict:
        """Engine-specific top-level fields of ``/v1/loads`` to keep (SGLang's own), or ``{}``."""

    async def set_weight_version(self, version: str) -> None:
        """Set the weight version without aborting anything; later tokens carry *version*."""

    async def pause(self, mode: str, clear_cache: Optional[bool] = None) -> None:
        """Pause the engine: ``"abort"`` holds new requests (the control aborts the rest);
        ``"keep"`` freezes in-flight requests and holds new ones. *clear_cache*: vLLM's flag
        (None: the engine's default); engines without caches to clear ignore it."""

    async def drain(self, clear_cache: Optional[bool] = None) -> Sequence[InFlight]:
        """Pause in ``"wait"`` mode: admit no new request (new ones are held until :meth:`resume`,
        and stay in the registry), let the admitted ones run on, and return those admitted ones,
        which the control waits for. May itself wait for the engine's own drain."""

    async def resume(self) -> None:
        """Undo :meth:`pause`; held and frozen requests go on. Harmless when not paused: the
        control always calls it, so that a pause it has no record of is ended too."""

    def engine_pause(self) -> Optional["EnginePause"]:
        """The pause the engine itself holds, whoever set it; None where every pause goes through
        the contract, so that the contract's own record is the truth."""

    def api_keys(self) -> list[str]:
        """Bearer keys the engine itself is configured with (empty when it has none)."""


class SharedEngineSeam(EngineSeam, Protocol):
    """The seam of one front end of an engine that several front ends share (vLLM's API server
    processes over one engine core): the engine's pause and weight version are set once, through
    one front end, and each of the others learns of it through these methods, without an engine
    call (see :mod:`engine_plugins.fanout.spread`)."""

    def note_pause(self, paused: bool) -> None:
        """The contract's pause of the shared engine is on (*paused*) or off, set through another
        front end: this one's own view of it follows (its requests the engine refuses while paused
        were refused by the contract's pause)."""

    def note_weight_version(self, version: str) -> None:
        """The shared engine's weight version is now *version*, set through another front end:
        :meth:`weight_version` and this front end's spans follow."""

    async def drain_share(self) -> Sequence[InFlight]:
        """This front end's share of a ``wait`` pause made through another front end: the admitted
        requests to wait for (it may itself wait for the engine's last answers to this front end)."""
