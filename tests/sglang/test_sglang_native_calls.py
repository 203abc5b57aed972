"""The TokenizerManager's own control methods called as Python (verl, ROLL) answer as the
plugin's routes do (:mod:`engine_plugins.engines.sglang.native_calls`), on the SGLang fake: the
plugin's hooks applied to a TokenizerManager class of the test's own, so that no other test sees them."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from engine_plugins.core.control import RolloutControl
from engine_plugins.engines.sglang import call_context
from engine_plugins.engines.sglang.native_calls import register_native_call_hooks
from engine_plugins.engines.sglang.seam import SGLangSeam
from engine_plugins.engines.sglang.tracking import register_hooks, tracker_for
from engine_plugins.host.assembly import assemble
from engine_plugins.host.config import Settings
from engine_plugins.host.http_api import RouteContext
from fakes.sglang.hook_registry import HookType, _wrap
from fakes.sglang.names import fake_names

pytestmark = pytest.mark.anyio

PROMPT = [1, 15, 27, 33, 41]


class _ClassRegistry:
    """SGLang's hook registry, applying each hook at once to one class (the test's own)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def register(self, target: str, hook: Any, kind: HookType) -> None:
        method = target.rsplit(".", 1)[1]
        setattr(self.cls, method, _wrap(getattr(self.cls, method), hook, kind))


class Engine:
    """The fake TokenizerManager with the plugin's hooks, its control and what it sent the scheduler."""

    def __init__(self, replace_native_routes: bool = True) -> None:
        serving = types.SimpleNamespace(api_key=None, admin_api_key=None, tokenizer_worker_num=1,
                                        enable_deterministic_inference=True, dp_size=1)
        self.names = names = fake_names(serving)
        names.TokenizerManager = type("TokenizerManager", (names.TokenizerManager,), {})
        names.HookRegistry = _ClassRegistry(names.TokenizerManager)
        self.control: RolloutControl = None  # type: ignore[assignment]
        stack = assemble(lambda: self.control, settings=Settings(replace_native_routes=replace_native_routes, abort_settle_s=5.0))
        register_hooks(names)
        register_native_call_hooks(names, RouteContext(hooks=stack.hooks, settings=stack.settings))
        self.tm = tm = names.TokenizerManager(step_s=0.01)
        self.control = RolloutControl(SGLangSeam(tracker_for(names, tm)), 30.0)
        self.sent: list = []
        dispatch = tm._dispatch_to_scheduler

        def recorded(obj: Any) -> None:
            self.sent.append(obj)
            dispatch(obj)

        tm._dispatch_to_scheduler = recorded

    def start(self, rid: str, max_new_tokens: int = 2000) -> asyncio.Task:
        obj = self.names.GenerateReqInput(rid=rid, input_ids=list(PROMPT), stream=False,
                                          sampling_params={"max_new_tokens": max_new_tokens, "ignore_eos": True})

        async def run() -> dict:
            return await self.tm.generate_request(obj).__anext__()

        return asyncio.ensure_future(run())

    async def until(self, what: str, predicate: Any) -> None:
        for _ in range(500):
            if predicate():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"setup: {what}")

    def aborts(self) -> list[tuple[str, bool]]:
        return [(m.rid, m.abort_all) for m in self.sent if type(m).__name__ == "AbortReq"]


def finish(out: dict) -> str:
    return out["meta_info"]["finish_reason"]["type"]


async def test_a_callers_abort_request_is_sent_before_it_returns_and_is_the_contracts_exact_abort():
    engine = Engine()
    tasks = [engine.start(rid) for rid in ("roll-1", "roll-2")]
    await engine.until("two requests running", lambda: len(engine.tm.scheduler.running) == 2)
    engine.tm.abort_request("roll-1")  # ROLL's call, from its own code
    assert engine.aborts() == [("roll-1", False)], "SGLang's abort is sent before the call returns"
    out = await asyncio.wait_for(tasks[0], 10)
    assert finish(out) == "abort"
    entry = engine.control.registry.get("roll-2")
    assert entry is not None and not entry.aborted, "the other request is kept"
    engine.tm.abort_request("no-such-rid")
    engine.tm.abort_request(abort_all=True)
    assert finish(await asyncio.wait_for(tasks[1], 10)) == "abort"


async def test_a_callers_abort_request_ends_the_requests_held_at_the_gate():
    engine = Engine()
    await engine.tm.pause_generation(engine.names.PauseGenerationReqInput(mode="abort"))
    held = engine.start("held-1")
    await engine.until("a request held at the gate", lambda: engine.control.registry.get("held-1") is not None)
    engine.tm.abort_request("held-1")
    out = await asyncio.wait_for(held, 10)
    assert finish(out) == "abort" and out["output_ids"] == []
    assert (await engine.control.loads()).in_flight == 0


async def test_sglangs_own_abort_request_keeps_sglangs_abort():
    # The TokenizerManager's own machinery (a weight update's abort_all_requests, a disconnected
    # client) is not the native route: no contract abort follows it.
    engine = Engine()
    task = engine.start("own-1")
    await engine.until("a request running", lambda: engine.tm.scheduler.running)
    internal = compile("def abort(tm, rid):\n    tm.abort_request(rid)\n", "tokenizer_manager.py", "exec")
    namespace = {"__name__": engine.names.internal_modules[0]}
    exec(internal, namespace)
    namespace["abort"](engine.tm, "own-1")
    entry = engine.control.registry.get("own-1")
    assert entry is not None and not entry.aborted, "SGLang's own abort is not recorded as the contract's"
    assert finish(await asyncio.wait_for(task, 10)) == "abort"


async def test_a_callers_in_place_pause_is_the_contracts_keep_and_continue_its_resume():
    engine = Engine()
    task = engine.start("kept-1", max_new_tokens=40)
    await engine.until("a request running", lambda: engine.tm.scheduler.running)
    await engine.tm.pause_generation(engine.names.PauseGenerationReqInput(mode="in_place"))
    state = engine.control.is_paused()
    assert (state.is_paused, state.mode) == (True, "keep")
    await engine.tm.continue_generation(engine.names.ContinueGenerationReqInput())
    assert not engine.control.is_paused().is_paused and not engine.tm.is_pause
    assert finish(await asyncio.wait_for(task, 10)) == "length"


async def test_a_callers_weight_version_update_is_the_contracts_bump_and_keeps_requests():
    engine = Engine()
    task = engine.start("bumped-1", max_new_tokens=60)
    await engine.until("a request running", lambda: engine.tm.scheduler.running)
    generation = engine.control.versions.current
    await engine.tm.update_weight_version(engine.names.UpdateWeightVersionReqInput(new_version="v2", abort_all_requests=True))
    assert engine.control.weight_version() == "v2" and engine.control.versions.current == generation + 1
    assert finish(await asyncio.wait_for(task, 10)) == "length"


async def test_with_sglangs_routes_kept_its_methods_are_kept_too():
    engine = Engine(replace_native_routes=False)
    await engine.tm.pause_generation(engine.names.PauseGenerationReqInput(mode="in_place"))
    assert engine.control.pause_mode is None, "SGLang's pause: not recorded as the contract's"
    assert engine.control.seam.tracker.scheduler_pause == "in_place", "the tracker still sees it"
    await engine.tm.continue_generation(engine.names.ContinueGenerationReqInput())


async def test_the_plugins_own_calls_reach_sglangs_originals():
    engine = Engine()
    with call_context.own_call():
        paused = engine.tm.pause_generation(engine.names.PauseGenerationReqInput(mode="retract"))
    await paused
    assert engine.control.pause_mode is None and engine.control.seam.tracker.scheduler_pause == "retract"
    with call_context.own_call():
        continued = engine.tm.continue_generation(engine.names.ContinueGenerationReqInput())
    await continued
