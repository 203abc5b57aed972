"""NeMo-RL's calls to the vLLM ``AsyncLLM`` it holds in its async generation worker (in-process,
no HTTP route), unchanged, with the plugin loaded: an in-flight weight refit
(``collective_rpc("update_weights_from_collective")`` while generations run, no pause, no cache
reset: NeMo-RL's defaults).

Source: NVIDIA-NeMo/RL at 7ea279abfbeb698b092856d0dab61e7cf39bc909 (lines in
``frameworks/nemo_rl_vllm_worker.py``).
"""

from __future__ import annotations

import asyncio

import pytest

from .inproc_checks import LONG_PROMPT, wait_unfinished
from .inproc_relay import Relay

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-nemo-rl")]

N, TOKENS = 3, 300


async def test_nemo_rls_in_flight_refit_keeps_running_generations_and_no_later_request_reuses_old_kv(target):
    async with Relay(target.url, target.api_key) as relay:
        await relay.call("generate_async", LONG_PROMPT, 2)
        warm = await relay.call("generate_async", LONG_PROMPT, 2)
        running = [relay.start("generate_async", [1, 15, 27, 33, 41 + i], TOKENS) for i in range(N)]
        await wait_unfinished(relay, N, "num_unfinished")
        refit = await relay.call("update_weights_from_collective_async")
        after = await relay.call("generate_async", LONG_PROMPT, 2)
        outs = await asyncio.gather(*running)
    assert warm["num_cached_tokens"] > 0, warm
    assert refit is True
    # NeMo-RL's in-flight refit: the running generations go on and finish whole.
    assert [(o["finish_reason"], len(o["token_ids"])) for o in outs] == [("length", TOKENS)] * N
    # The weight load through the engine client scopes the prefix cache anew: a prompt cached
    # before the refit is computed again with the new weights (NeMo-RL resets no cache by default).
    assert after["num_cached_tokens"] == 0, after
