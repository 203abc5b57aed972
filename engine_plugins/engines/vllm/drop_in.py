"""vLLM's own control methods on an attached ``AsyncLLM``, routed through the contract.

Frameworks that hold the engine in-process (verl, OpenRLHF, NeMo-RL, ROLL) call
``pause_generation``, ``resume_generation`` and ``abort`` on it. On an attached engine client
those calls become the contract's ``pause``, ``resume`` and ``abort`` hooks, so that the caller
gets the contract's rules (every accepted request covered, the pause recorded, the plugins
called) through vLLM's unchanged signatures and return values. The plugin's own calls (the
contract's pause reaching vLLM, :func:`.facade.as_plugin`) and vLLM's internal aborts
(``internal=True``) reach vLLM's methods as before.

``update_weight_version`` and ``collective_rpc`` are wrapped by the tracker
(:meth:`.facade.VllmEngine.wrap_entry_points`): a version set becomes the contract's bump, a
weight load moves the prefix-cache scope.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Awaitable, Callable, Iterable, Protocol

from engine_plugins.engines.vllm.facade import plugin_calling

# vLLM's pause modes (``PauseMode``); any other value goes to vLLM, which refuses it its own way.
PAUSE_MODES = ("abort", "wait", "keep")


class Contract(Protocol):
    """What the wrappers call: the contract's operations on this engine client."""

    def bypassed(self) -> bool:
        """True when vLLM's own method must answer (the engine core has died)."""

    def knows(self, request_id: str) -> bool:
        """Whether *request_id* is a request the contract tracks (one of ``generate``'s)."""

    def pause(self, mode: str, clear_cache: bool) -> Awaitable[Any]:
        """The contract's pause in vLLM's *mode*, with vLLM's *clear_cache*."""

    def resume(self) -> Awaitable[Any]:
        """The contract's resume."""

    def abort(self, request_ids: list[str]) -> Awaitable[Any]:
        """The contract's abort of exactly *request_ids*, without waiting (as vLLM's)."""


def install(llm: Any, contract: Contract) -> Callable[[], None]:
    """Wrap ``pause_generation``, ``resume_generation`` and ``abort`` on the *llm* instance so
    that calls from outside the plugin go through *contract*; returns a function that restores
    vLLM's methods."""
    original_pause, original_resume, original_abort = llm.pause_generation, llm.resume_generation, llm.abort
    pause_signature = inspect.signature(original_pause)
    abort_signature = inspect.signature(original_abort)

    # functools.wraps keeps vLLM's name, docstring and (through __wrapped__) signature.
    @functools.wraps(original_pause)
    async def pause_generation(*args: Any, **kwargs: Any) -> None:
        if plugin_calling() or contract.bypassed():
            return await original_pause(*args, **kwargs)
        # A call vLLM would refuse (an unknown argument) raises the same TypeError here.
        bound = pause_signature.bind(*args, **kwargs)
        bound.apply_defaults()
        mode, clear_cache = bound.arguments.get("mode", "abort"), bound.arguments.get("clear_cache", True)
        if bound.arguments.get("wait_for_inflight_requests"):
            mode = "wait"  # vLLM 0.26 to 0.31: the deprecated flag means wait mode
        if mode not in PAUSE_MODES:
            return await original_pause(*args, **kwargs)
        await contract.pause(mode, bool(clear_cache))
        return None

    @functools.wraps(original_resume)
    async def resume_generation(*args: Any, **kwargs: Any) -> None:
        if plugin_calling() or contract.bypassed():
            return await original_resume(*args, **kwargs)
        await contract.resume()
        return None

    @functools.wraps(original_abort)
    async def abort(*args: Any, **kwargs: Any) -> None:
        bound = abort_signature.bind(*args, **kwargs)
        bound.apply_defaults()
        request_id, internal = bound.arguments["request_id"], bound.arguments.get("internal", False)
        if internal or plugin_calling() or contract.bypassed():
            # Internal ids: vLLM's own aborts of a cancelled generate(), never the caller's.
            return await original_abort(*args, **kwargs)
        ids = _as_ids(request_id)
        known = {rid for rid in ids if contract.knows(rid)}
        tracked, untracked = [rid for rid in ids if rid in known], [rid for rid in ids if rid not in known]
        if tracked:
            # Exact ids only: an empty list would be the contract's "every request".
            await contract.abort(tracked)
        if untracked:
            # Not generate()'s (encode(), a scoring request's): vLLM aborts them as before.
            await original_abort(untracked, internal)
        return None

    llm.pause_generation, llm.resume_generation, llm.abort = pause_generation, resume_generation, abort

    def restore() -> None:
        del llm.pause_generation
        del llm.resume_generation
        del llm.abort

    return restore


def _as_ids(request_id: str | Iterable[str]) -> list[str]:
    """vLLM's ``request_id`` argument (one id or several) as a list, read once."""
    return [request_id] if isinstance(request_id, str) else list(request_id)
