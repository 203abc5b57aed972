"""In SGLang's scheduler process: a running request that is aborted ends without one more decode pass.

SGLang aborts a running request by marking it (``to_finish``); the mark turns into its finish
when the scheduler next processes a pass's results. Its overlap loop plans and launches the next
pass before it processes the last one's results, so the aborted request runs that next pass
too, and its answer waits for it. From 0.5.22 SGLang leaves out of the pass it plans the
requests that the queued results will finish by length (``Scheduler._reqs_finishing_inflight``);
the plugin adds those that the queued results will finish because they were aborted. After an
abort of everything the planned pass is empty, so the scheduler processes the queued results at
once: the aborted requests' answers leave a pass earlier, and the pass they would have run is
not computed. Requests an abort reached while still in a prefill batch, or not in the queued
results, end as SGLang ends them.

Looked at only while an abort's requests are still in the running batch, so there is no
per-pass cost otherwise; not with DP attention (``require_mlp_sync``), where the ranks plan
their passes together. The SGLang behaviour this relies on is in ``docs/engine-notes.md`` ("The
scheduler and outputs").

This module is the code that runs in that process, with its facade (:class:`SchedulerNames`):
the HTTP server's process checked every name it uses at startup (:data:`~.manifest.MANIFEST`).
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from typing import Any

from engine_plugins.engines.sglang.manifest import SCHEDULER_MODULE


@dataclass
class SchedulerNames:
    """What the plugin uses in SGLang's scheduler process."""

    Scheduler: type
    HookRegistry: Any
    HookType: Any

    def hook(self, method: str, hook: Any) -> None:
        """Register an AROUND *hook* on ``Scheduler.<method>``: ``hook(original, scheduler, ...)``."""
        cls = self.Scheduler
        self.HookRegistry.register(f"{cls.__module__}.{cls.__qualname__}.{method}", hook, self.HookType.AROUND)

    def leaves_finishing_requests_out(self) -> bool:
        """Whether the scheduler leaves requests its queued results finish out of the pass it plans (0.5.22 on)."""
        return hasattr(self.Scheduler, "_reqs_finishing_inflight")


def in_scheduler_process() -> bool:
    """Whether this (child) process may run SGLang's scheduler: the process was started from the
    scheduler's module, so it is imported before plugins load. (The DP controller imports it
    too; a hook there is unused.)"""
    return SCHEDULER_MODULE in sys.modules


def load_scheduler_names() -> SchedulerNames:
    """The names the plugin uses in the scheduler process, from the installed SGLang."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    return SchedulerNames(Scheduler=Scheduler, HookRegistry=HookRegistry, HookType=HookType)


def in_queued_results(scheduler: Any, marked: list[Any]) -> list[Any]:
    """Those of the *marked* requests (aborted, not yet finished) whose queued result (the last
    pass's) ends them, as SGLang picks those that result ends by length."""
    if not scheduler.enable_skip_finishing_decode or not scheduler.result_queue or scheduler.require_mlp_sync:
        return []
    queued = set(scheduler.result_queue[0][0].reqs)
    return [req for req in marked if req in queued and req.beam_group is None]


def register_abort_without_last_pass(names: SchedulerNames) -> list[str]:
    """Register the hooks with SGLang's hook registry (applied by SGLang once every plugin has
    loaded, in this process); nothing where SGLang leaves no finishing request out (before 0.5.22).
    Returns the methods hooked, for the startup log."""
    if not names.leaves_finishing_requests_out():
        return []
    aborted: "weakref.WeakSet[Any]" = weakref.WeakSet()
    """The schedulers with aborted requests possibly still in their running batch."""

    def abort_request(original: Any, scheduler: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(scheduler, *args, **kwargs)
        aborted.add(scheduler)
        return result

    def reqs_finishing_inflight(original: Any, scheduler: Any, batch: Any, *args: Any, **kwargs: Any) -> list[Any]:
        finishing = original(scheduler, batch, *args, **kwargs)
        if scheduler not in aborted:
            return finishing
        # One pass over the batch: the requests an abort marked that have not finished yet.
        marked = [req for req in batch.reqs if req.to_finish is not None and not req.finished()]
        if not marked:
            aborted.discard(scheduler)
            return finishing
        chosen = set(finishing)
        return finishing + [req for req in in_queued_results(scheduler, marked) if req not in chosen]

    names.hook("abort_request", abort_request)
    names.hook("_reqs_finishing_inflight", reqs_finishing_inflight)
    return ["Scheduler.abort_request", "Scheduler._reqs_finishing_inflight"]
