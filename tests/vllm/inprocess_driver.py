"""A framework's in-process vLLM, as NeMo-RL's in-flight weight updates and prime-rl drive it:
``AsyncLLM.from_engine_args`` in this process, no server, and vLLM's own methods for the update.
Run by tests/vllm/test_vllm_inprocess.py in the engine's interpreter (``VLLM_PLUGINS=engine_plugins``,
the checkout's plugin on ``PYTHONPATH``); it prints one line ``RESULT <json>`` with what it saw.

    python tests/vllm/inprocess_driver.py --model CHECKPOINT_A --reload CHECKPOINT_B

The sequence: a 600-token prompt twice (the second reuses the cached blocks: the cache works);
a long request running, and another aborted by id through ``AsyncLLM.abort``; then
``pause_generation(mode="keep", clear_cache=False)``, ``collective_rpc("reload_weights")`` from
checkpoint B, ``update_weight_version("v2")``, ``resume_generation()``; the same prompt again.
"""

from __future__ import annotations

import argparse
import asyncio
import json

PROMPT_TOKENS = 600
KEPT_TOKENS = 400


async def drive(model: str, reload_from: str) -> dict:
    """The sequence above; what it saw, as JSON-able values."""
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.v1.engine.async_llm import AsyncLLM

    # EngineArgs.__post_init__ loads vLLM's general plugins, before the engine exists.
    args = AsyncEngineArgs(model=model, load_format="auto", dtype="float32", max_model_len=2048, max_num_seqs=16)
    llm = AsyncLLM.from_engine_args(args)
    prompt = TokensPrompt(prompt_token_ids=[10 + (i * 7) % 400 for i in range(PROMPT_TOKENS)])
    started: dict[str, asyncio.Event] = {}

    async def run(request_id: str, tokens: list[int], max_tokens: int) -> dict:
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
        started[request_id] = asyncio.Event()
        final = None
        async for final in llm.generate(TokensPrompt(prompt_token_ids=tokens), params, request_id=request_id):
            if final.outputs[0].token_ids:
                started[request_id].set()
        out = final.outputs[0]
        spans = [[s.version, s.start, s.end] for s in (getattr(out, "weight_versions", None) or [])]
        return {"cached": final.num_cached_tokens, "tokens": len(out.token_ids), "finish": out.finish_reason, "spans": spans}

    seen: dict = {}
    try:
        seen["first"] = await run("first", prompt["prompt_token_ids"], 1)
        seen["again"] = await run("again", prompt["prompt_token_ids"], 1)
        kept = asyncio.create_task(run("kept", [1, 15, 27, 33, 41], KEPT_TOKENS))
        gone = asyncio.create_task(run("gone", [1, 16, 28, 34, 42], KEPT_TOKENS))
        await asyncio.wait_for(asyncio.gather(_started(started, "kept"), _started(started, "gone")), 120)
        await llm.abort("gone")
        seen["gone"] = await asyncio.wait_for(gone, 60)
        await llm.pause_generation(mode="keep", clear_cache=False)
        seen["paused"] = await llm.is_paused()
        seen["contract_while_paused"] = await _contract_state(llm)
        await llm.collective_rpc("reload_weights", kwargs={"weights_path": reload_from})
        await llm.update_weight_version("v2")
        await llm.resume_generation()
        seen["after"] = await run("after", prompt["prompt_token_ids"], 1)
        seen["kept"] = await asyncio.wait_for(kept, 300)
        seen["weight_version"] = await llm.get_weight_version()
        seen["contract_after"] = await _contract_state(llm)
    finally:
        llm.shutdown()
    return seen


async def _started(started: dict, request_id: str) -> None:
    """Until *request_id* has its first token."""
    while request_id not in started:
        await asyncio.sleep(0.01)
    await started[request_id].wait()


async def _contract_state(llm) -> dict:
    """The contract's view of the engine (its pause state, version and requests), or why there is
    none; never attaching an engine that is not attached yet (that would change what it does)."""
    try:
        from engine_plugins.engines.vllm.inprocess import attachment_of
        from engine_plugins.inprocess import attach

        if attachment_of(llm) is None:
            return {"error": "not attached"}
        control = attach(llm)
        loads = await control.loads()
        return {"paused": loads.paused, "weight_version": loads.weight_version, "in_flight": loads.in_flight,
                "mode": (await control.is_paused()).mode}
    except Exception as exc:  # the checkout without the in-process adapter: the test says what is missing
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    """Parse the flags, drive, print the result line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--reload", required=True, help="the checkpoint reload_weights loads")
    args = parser.parse_args()
    print("RESULT " + json.dumps(asyncio.run(drive(args.model, args.reload))), flush=True)


if __name__ == "__main__":
    main()
