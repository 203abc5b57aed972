"""What every hook receives as ``control``: the server's contract operations, as a protocol.

One API process (SGLang, the stub, vLLM with one API process) gets a
:class:`~engine_plugins.core.control.RolloutControl`; vLLM with several API processes gets a
:class:`~engine_plugins.fanout.spread.ServerControl` that covers all of them. Both implement this
protocol, and a plugin should use nothing else of them.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

from engine_plugins.contract.schema import (
    AbortResult,
    LoadsResult,
    PartialGenerateResult,
    PauseState,
    SamplingParams,
    UpdateWeightVersionResult,
    WeightSwap,
)


@runtime_checkable
class Control(Protocol):
    """The contract's operations on one server (every API process of it), as the hooks take them.

    A hook that *decorates* an operation awaits the matching method here (``await
    control.abort(...)``) and returns what it made of the answer; see the hookspecs.
    """

    #: The requests this process has accepted and not released: ``len(registry)``,
    #: ``registry.select(ids=None)`` (the entries), ``registry.get(engine_id)``.
    registry: Any

    async def abort(self, request_ids: Optional[list[str]], wait: bool, timeout_s: Optional[float] = None,
                    reason: Optional[str] = None) -> AbortResult:
        """Abort *request_ids* exactly (None or empty: every accepted request), waiting for idle if *wait*."""
        ...

    async def select_by_age(self, admitted_before: Optional[str] = None, max_staleness: Optional[int] = None) -> list[str]:
        """The ids of the requests admitted before a weight version, or more than *max_staleness* bumps ago."""
        ...

    async def nothing_aborted(self) -> AbortResult:
        """The answer of an abort that had nothing to abort (the server's counts as they are)."""
        ...

    async def loads(self) -> LoadsResult:
        """Running and waiting requests, exactly, with the pause state and the weight version."""
        ...

    async def update_weight_version(self, new_version: str, abort_all_requests: bool) -> UpdateWeightVersionResult:
        """Bump the weight version; in-flight work is kept unless *abort_all_requests*."""
        ...

    async def partial_generate(self, input_ids: list[int], sampling_params: SamplingParams, request_id: Optional[str],
                               max_staleness: Optional[int] = None) -> PartialGenerateResult:
        """Generate, returning every token and logprob even when aborted or paused mid-way."""
        ...

    async def pause(self, mode: str, timeout_s: Optional[float] = None, clear_cache: Optional[bool] = None,
                    weight_swap: Optional[WeightSwap] = None) -> PauseState:
        """Pause in ``abort``, ``keep`` or ``wait`` mode (opening *weight_swap* if given)."""
        ...

    async def resume(self) -> PauseState:
        """End the pause; requests held or frozen by it go on."""
        ...

    def is_paused(self) -> PauseState:
        """The pause state, and the open weight swap if any."""
        ...

    def open_weight_swap(self) -> Optional[WeightSwap]:
        """The open weight swap (``expired`` once its lease has run out), or None."""
        ...

    def weight_version(self) -> str:
        """The weight version new tokens are generated with."""
        ...
