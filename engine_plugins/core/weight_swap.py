"""The contract's weight swap: one begin/commit pair around the trainer's own transfer.

An RL step's boundary is: pause, load the new weights, bump the version, resume. The trainer
calls ``POST /weight_swap/begin`` (the pause, in any of the contract's modes, with a lease), then
loads the weights with the engine's own update calls (any number of them: SGLang's
``update_weights_from_*``, vLLM's ``/collective_rpc reload_weights`` or its weight-transfer
routes), then ``POST /weight_swap/commit``, which bumps to the swap's version once, on every API
process, and resumes, always, also when the bump failed. No prefix-cache flush is needed: the
requests admitted after the swap are scoped by its version (:mod:`.cache_scope`), and the
engines' weight loads scope the cache anew as well.

A trainer that dies mid-swap leaves a server that says so: once the lease has run out the swap
is ``expired`` in ``/is_paused`` and ``/v1/loads``, and the server stays
paused (resuming would generate with weights that may be half-loaded) until a commit or a
resume ends it.

The functions take the control the hooks receive: a :class:`~.control.RolloutControl`, or on a
server of several API processes its :class:`~.spread.ServerControl`, whose pause, bump and
resume cover every process, and which carries the swap's record to each of them with the pause.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Optional

from engine_plugins.contract.errors import ContractError
from engine_plugins.contract.schema import WeightSwap, WeightSwapResult


async def begin_weight_swap(
    control: Any, version: str, mode: str, clear_cache: Optional[bool], lease_s: float, timeout_s: Optional[float] = None
) -> WeightSwapResult:
    """Pause in *mode* for a swap to *version*; a 409 while another swap is open and not expired
    (checked by the pause, under the lock that orders pauses and resumes)."""
    now = time.time()
    swap = WeightSwap(
        swap_id="ws-" + uuid.uuid4().hex[:16], version=version, previous_version=control.weight_version(), mode=mode,
        began_at=now, lease_expires_at=now + lease_s,
    )
    try:
        await control.pause(mode, timeout_s, clear_cache, weight_swap=swap)
    except ContractError as exc:
        raise ContractError(exc.status, f"weight swap {swap.swap_id}: the pause failed: {exc.message}", exc.type) from None
    state = control.is_paused()
    return WeightSwapResult(
        swap_id=swap.swap_id, version=version, previous_version=swap.previous_version, state="open",
        is_paused=state.is_paused, lease_expires_at=swap.lease_expires_at,
    )


async def commit_weight_swap(control: Any, swap_id: Optional[str] = None, version: Optional[str] = None) -> WeightSwapResult:
    """Bump to the open swap's version and resume (the resume also when the bump fails, whose
    error then says so); the swap is named by *swap_id* or by its *version*. A 404 when no open
    swap has that name (already committed, or never begun)."""
    swap = control.open_weight_swap()
    if swap is None or (swap_id is not None and swap.swap_id != swap_id) or (version is not None and swap.version != version):
        named = f"id {swap_id!r}" if swap_id is not None else f"version {version!r}"
        held = f"; the open swap is {swap.swap_id} to {swap.version!r}" if swap is not None else "; no swap is open"
        raise ContractError(404, f"no open weight swap with {named}{held}", "not_found")
    failed: Optional[ContractError] = None
    # Through the bump hook when the plugin stack set it, so that the plugins (metrics) see it.
    bump = control.dispatch_bump or control.update_weight_version
    try:
        await bump(new_version=swap.version, abort_all_requests=False)
    except ContractError as exc:
        failed = exc
    try:
        state = await control.resume()
    except ContractError as exc:
        bump = f"the version bump to {swap.version!r} failed too ({failed.message})" if failed else f"the version is {swap.version!r}"
        raise ContractError(exc.status, f"weight swap {swap.swap_id}: the resume failed ({exc.message}); {bump}; "
                                        "resume again", exc.type) from None
    if failed is not None:
        raise ContractError(failed.status, f"weight swap {swap.swap_id}: the version bump to {swap.version!r} failed "
                                           f"({failed.message}); the server was resumed", failed.type)
    return WeightSwapResult(
        swap_id=swap.swap_id, version=swap.version, previous_version=swap.previous_version, state="committed",
        is_paused=state.is_paused,
    )
