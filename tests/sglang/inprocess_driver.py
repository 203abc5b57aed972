"""verl's abort-mode pause on SGLang held in-process, with the plugin installed as a user has it;
prints one JSON object (tests/sglang/test_sglang_inprocess.py reads it).

    python tests/sglang/inprocess_driver.py [the flags of python -m sglang.launch_server]
    python tests/sglang/inprocess_driver.py --fake     # the SGLang fake (tests/fakes/sglang)

The real run holds ``sglang.Engine(server_args=...)`` in this process (SGLang's ``load_plugins()``
in ``Engine.__init__`` installs the plugin); the fake run installs the plugin on the fake and
applies the hooks, as SGLang's plugin loading does. Then, on the engine's TokenizerManager as the
frameworks call it: four long requests run (``generate_request``), verl's
``await tokenizer_manager.pause_generation(PauseGenerationReqInput(mode="abort"))`` (verl
``verl/workers/rollout/sglang_rollout/async_sglang_server.py``), the state then,
``continue_generation`` and one short request. SGLang's abort-mode pause polls with
``asyncio.sleep(1.0)`` (``managers/tokenizer_manager.py`` 0.5.23 ``pause_generation``): each of
those sleeps is counted.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import types
from typing import Any

PROMPT = [1, 15, 27, 33, 41]
LONG_TOKENS = 1500
SHORT_TOKENS = 8
RUNNING = 4


def count_poll_sleeps(tm_module: Any) -> list[float]:
    """Replace *tm_module*'s ``asyncio`` with one whose ``sleep`` notes each sleep taken by a
    ``pause_generation`` frame (SGLang's poll); the list of their delays."""
    import asyncio as real

    taken: list[float] = []

    def sleep(delay: float, *args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_code.co_name == "pause_generation":
            taken.append(delay)
        return real.sleep(delay, *args, **kwargs)

    proxy = types.ModuleType("asyncio")
    proxy.__dict__.update(real.__dict__)
    proxy.sleep = sleep
    tm_module.asyncio = proxy
    return taken


def fake_engine() -> tuple[Any, Any, Any]:
    """The SGLang fake with the plugin installed (its hooks applied): its TokenizerManager, its
    io_struct module and its TokenizerManager module."""
    from engine_plugins.engines.sglang.plugin import install
    from fakes.sglang import io_struct
    from fakes.sglang import tokenizer_manager as tm_module
    from fakes.sglang.hook_registry import HookRegistry
    from fakes.sglang.names import fake_names

    serving = types.SimpleNamespace(api_key=None, admin_api_key=None, tokenizer_worker_num=1,
                                    enable_deterministic_inference=True, dp_size=1)
    install(fake_names(serving))
    HookRegistry.apply_hooks(source="engine_plugins")
    return tm_module.TokenizerManager(step_s=0.01), io_struct, tm_module


def real_engine(argv: list[str]) -> tuple[Any, Any, Any]:
    """``sglang.Engine`` built in this process from SGLang's flags (the plugin loads there): the
    engine, SGLang's io_struct module and its TokenizerManager module."""
    import sglang
    from sglang.srt.managers import io_struct
    from sglang.srt.managers import tokenizer_manager as tm_module
    from sglang.srt.server_args import prepare_server_args

    return sglang.Engine(server_args=prepare_server_args(argv)), io_struct, tm_module


async def scenario(tm: Any, io: Any, poll_sleeps: list[float], engine: Any) -> dict:
    """Four long requests, verl's abort-mode pause, continue, one short request."""
    chunks: dict[str, list[dict]] = {}

    async def generate(rid: str, max_new_tokens: int) -> dict:
        obj = io.GenerateReqInput(rid=rid, input_ids=list(PROMPT), stream=True,
                                  sampling_params={"max_new_tokens": max_new_tokens, "ignore_eos": True})
        last: dict = {}
        async for chunk in tm.generate_request(obj, None):
            chunks.setdefault(rid, []).append(chunk)
            last = chunk
        return last

    def tokens(chunk: dict) -> int:
        return int(chunk.get("meta_info", {}).get("completion_tokens", 0))

    rids = [f"long-{i}" for i in range(RUNNING)]
    tasks = [asyncio.ensure_future(generate(rid, LONG_TOKENS)) for rid in rids]
    deadline = time.monotonic() + 120
    while not all(chunks.get(rid) and tokens(chunks[rid][-1]) >= 2 for rid in rids):
        if time.monotonic() > deadline or any(t.done() for t in tasks):
            raise SystemExit(f"setup: {RUNNING} requests did not all run: {[len(chunks.get(r, [])) for r in rids]}")
        await asyncio.sleep(0.01)
    tokens_before = {rid: tokens(chunks[rid][-1]) for rid in rids}

    started = time.perf_counter()
    await tm.pause_generation(io.PauseGenerationReqInput(mode="abort"))
    pause_s = time.perf_counter() - started
    at_return = {
        "in_rid_to_state": sorted(r for r in rids if r in tm.rid_to_state),
        "tasks_done": sum(t.done() for t in tasks),
        "is_pause": bool(tm.is_pause),
    }
    finals = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    ended = {
        rid: {"finish_reason": (final.get("meta_info", {}).get("finish_reason") or {}).get("type"),
              "tokens": tokens(final), "tokens_before_pause": tokens_before[rid]}
        for rid, final in zip(rids, finals)
    }
    contract = await contract_view(engine)
    await tm.continue_generation(io.ContinueGenerationReqInput())
    after = await asyncio.wait_for(generate("short-after", SHORT_TOKENS), 60)
    return {
        "pause_s": round(pause_s, 3),
        "poll_sleeps": poll_sleeps,
        "at_return": at_return,
        "ended": ended,
        "contract_while_paused": contract,
        "is_pause_after_continue": bool(tm.is_pause),
        "after_continue": {"finish_reason": (after.get("meta_info", {}).get("finish_reason") or {}).get("type"),
                           "tokens": tokens(after)},
        "contract_after_continue": await contract_view(engine),
    }


async def contract_view(engine: Any) -> Any:
    """The contract's view of the engine (``engine_plugins.inprocess.attach``): its pause state
    and its requests in flight; the error's text where it cannot attach."""
    try:
        from engine_plugins.inprocess import EngineControl, attach

        if type(engine).__module__.startswith("fakes."):
            # The generic attach() takes SGLang's own classes only: the fake's goes to the adapter.
            from engine_plugins.engines.sglang import inprocess

            control = EngineControl(inprocess.attach(engine), "sglang")
        else:
            control = attach(engine)
        state, loads = await control.is_paused(), await control.loads()
        return {"is_paused": state.is_paused, "mode": state.mode, "in_flight": loads.in_flight}
    except Exception as exc:  # noqa: BLE001 - reported, the test says what it expected
        return f"{type(exc).__name__}: {exc}"


def main() -> None:
    """Build the engine, run the scenario on its loop, print the JSON."""
    argv = sys.argv[1:]
    if argv == ["--fake"]:
        tm, io, tm_module = fake_engine()
        engine, loop = tm, asyncio.new_event_loop()
    else:
        engine, io, tm_module = real_engine(argv)
        tm, loop = engine.tokenizer_manager, engine.loop
    poll_sleeps = count_poll_sleeps(tm_module)
    try:
        result = loop.run_until_complete(scenario(tm, io, poll_sleeps, engine))
    finally:
        if engine is not tm:
            engine.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
