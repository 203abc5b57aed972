"""The scheduler hooks that end an aborted running request without one more decode pass
(engine_plugins/engines/sglang/scheduler_abort.py), on SGLang's overlap loop reduced to the
order of its steps (``Scheduler.event_loop_overlap`` of 0.5.22 on: receive, plan the next pass
leaving out the requests the queued results finish, launch it, process the queued results).
The real scheduler runs them in the SGLang contract suite (every abort of a running request)."""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from engine_plugins.engines.sglang.scheduler_abort import SchedulerNames, register_abort_without_last_pass


class Req:
    """A running request: an abort sets ``to_finish``; processing a pass's results finishes it."""

    beam_group = None

    def __init__(self, rid: str) -> None:
        self.rid = rid
        self.to_finish: Optional[str] = None
        self.finished_reason: Optional[str] = None

    def finished(self) -> bool:
        return self.finished_reason is not None


@dataclass
class Batch:
    reqs: list[Req]


@dataclass(eq=False)  # hashable by identity, as SGLang's Scheduler
class Scheduler:
    """SGLang's overlap loop, in the order of its steps; ``events`` records passes and outputs."""

    running: list[Req]
    require_mlp_sync: bool = False
    enable_skip_finishing_decode: bool = True
    result_queue: deque = field(default_factory=deque)
    last_batch: Optional[Batch] = None
    inbox: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    def abort_request(self, recv_req: str) -> None:
        for req in self.running:
            if not req.finished() and (recv_req == "all" or req.rid == recv_req):
                req.to_finish = "abort"

    def _reqs_finishing_inflight(self, batch: Batch) -> list[Req]:
        return []  # none finishes by length in these tests

    def process(self) -> None:
        batch, _ = self.result_queue.popleft()
        self.events.append("results")
        for req in batch.reqs:
            if req.to_finish and not req.finished():
                req.finished_reason, req.to_finish = req.to_finish, None
                self.events.append(f"out {req.rid}")

    def step(self) -> None:
        for message in self.inbox:
            self.abort_request(message)
        self.inbox.clear()
        self.running = [r for r in self.running if not r.finished()]
        leave_out = self._reqs_finishing_inflight(Batch(self.running)) if self.running else []
        planned = [r for r in self.running if r not in leave_out]
        batch = Batch(planned) if planned else None
        if batch:
            self.events.append(f"pass {' '.join(r.rid for r in batch.reqs)}")
            self.result_queue.append((Batch(list(batch.reqs)), None))
        if self.last_batch:
            self.process()
        self.last_batch = batch


class HookedScheduler(Scheduler):
    """The same loop with the plugin's hooks applied, as SGLang's hook registry applies AROUND hooks."""


class Registry:
    """Applies each AROUND hook to :class:`HookedScheduler` at once."""

    @staticmethod
    def register(target: str, hook: Any, hook_type: Any) -> None:
        method = target.rsplit(".", 1)[-1]
        original = getattr(HookedScheduler, method)
        setattr(HookedScheduler, method, functools.wraps(original)(lambda *a, **k: hook(original, *a, **k)))


@pytest.fixture(scope="module", autouse=True)
def hooked() -> None:
    register_abort_without_last_pass(
        SchedulerNames(Scheduler=HookedScheduler, HookRegistry=Registry, HookType=SimpleNamespace(AROUND="around")))


def run(scheduler: Scheduler, abort: str = "all", passes_after: int = 2) -> list[str]:
    for _ in range(2):
        scheduler.step()
    scheduler.events.clear()
    scheduler.inbox.append(abort)
    for _ in range(passes_after):
        scheduler.step()
    return scheduler.events


def test_without_the_plugin_an_aborted_request_runs_one_more_pass_before_it_ends() -> None:
    assert run(Scheduler([Req("a"), Req("b")])) == ["pass a b", "results", "out a", "out b", "results"]


def test_with_the_plugin_it_ends_at_once_and_that_pass_is_not_run() -> None:
    assert run(HookedScheduler([Req("a"), Req("b")])) == ["results", "out a", "out b"]


def test_the_requests_not_aborted_run_on() -> None:
    assert run(HookedScheduler([Req("a"), Req("b")]), abort="a") == ["pass b", "results", "out a", "pass b", "results"]


def test_not_with_dp_attention_where_the_ranks_plan_together() -> None:
    events = run(HookedScheduler([Req("a")], require_mlp_sync=True))
    assert events == ["pass a", "results", "out a", "results"]


def test_before_0_5_22_nothing_is_hooked() -> None:
    class Older:
        pass

    registered: list[str] = []
    names = SchedulerNames(Scheduler=Older, HookRegistry=SimpleNamespace(register=lambda *a: registered.append(a[0])),
                           HookType=SimpleNamespace(AROUND="around"))
    register_abort_without_last_pass(names)
    assert registered == []
