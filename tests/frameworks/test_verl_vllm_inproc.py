"""verl's calls to the vLLM ``AsyncLLM`` its ``vLLMHttpServer`` actor holds (in-process), unchanged,
with the plugin loaded: ``abort_request`` of one rollout (vLLM's internals:
``output_processor.request_states``, ``output_processor.abort_requests``,
``engine_core.abort_requests_async``, ``reset_prefix_cache``), then a weight load through the
actor's ``collective_rpc``.

Source: volcengine/verl at b178a3cd56f58b2d502255daba591e92833930a7 (lines in
``frameworks/verl_vllm_server.py``); vLLM 0.32, not verl's 0.24.
"""

from __future__ import annotations

import asyncio

import pytest

from .inproc_checks import LONG_PROMPT, wait_unfinished
from .inproc_relay import Relay

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-verl")]

N, TOKENS = 3, 300


def sampling(max_tokens: int) -> dict:
    return {"max_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True}


async def test_verls_abort_misses_on_vllm_0_32_and_its_collective_rpc_load_drops_old_kv(target):
    async with Relay(target.url, target.api_key) as relay:
        await relay.call("generate", LONG_PROMPT, sampling(2), "warm-0")
        warm = await relay.call("generate", LONG_PROMPT, sampling(2), "warm-1")
        rollouts = [relay.start("generate", [1, 15, 27, 33, 41 + i], sampling(TOKENS), f"verl-{i}") for i in range(N)]
        await wait_unfinished(relay, N, "num_unfinished")
        aborted = await relay.call("abort_request", "verl-0")
        outs = await asyncio.gather(*rollouts)
        await relay.call("collective_rpc", "update_weights_from_collective")
        after = await relay.call("generate", LONG_PROMPT, sampling(2), "after")
    assert warm["num_cached_tokens"] > 0, warm
    # verl's abort looks the id up in vLLM's output processor, which in the releases the plugin supports keys its
    # requests by internal ids (the caller's id and a random suffix): on 0.32 the request is not
    # found and runs on (verl's pinned 0.24 found it). The call reaches vLLM's internals, not
    # AsyncLLM.abort, so no plugin hook can change that: verl's own break on newer vLLM.
    assert aborted == {"aborted": False, "error": "Request verl-0 not found"}, aborted
    assert [(o["stop_reason"], len(o["token_ids"])) for o in outs] == [("completed", TOKENS)] * N
    # The load through collective_rpc: no request after it reuses prefix KV computed before it.
    assert after["num_cached_tokens"] == 0, after
