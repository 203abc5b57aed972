"""OpenRLHF's calls to the vLLM engine it holds in its ``RolloutRayActor`` (in-process, no HTTP
route), unchanged, with the plugin loaded: its partial-rollout weight broadcast
(``pause_generation(mode="keep")``, ``reset_prefix_cache``, ``collective_rpc("update_weight", ...)``
per parameter, ``resume_generation``) over running rollouts.

Source: OpenRLHF/OpenRLHF at 3c3be6234e0cb353e76bb8019947db9dfe99fca7 (lines in
``frameworks/openrlhf_vllm_engine.py``, which holds the engine as OpenRLHF's actor does).
"""

from __future__ import annotations

import asyncio

import pytest

from .inproc_relay import Relay
from .inproc_checks import LONG_PROMPT, wait_unfinished

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-openrlhf")]

N, TOKENS = 3, 300


async def test_openrlhfs_keep_broadcast_finishes_kept_rollouts_whole_and_no_later_request_reuses_old_kv(target):
    async with Relay(target.url, target.api_key) as relay:
        # The prompt is in the prefix cache before the broadcast (its second send reuses it).
        await relay.call("generate", LONG_PROMPT, 2)
        warm = await relay.call("generate", LONG_PROMPT, 2)
        rollouts = [relay.start("generate", [1, 15, 27, 33, 41 + i], TOKENS) for i in range(N)]
        await wait_unfinished(relay, N)
        sent = await relay.call("broadcast_to_vllm")
        outs = await asyncio.gather(*rollouts)
        after = await relay.call("generate", LONG_PROMPT, 2)
    assert warm["num_cached_tokens"] > 0, warm
    assert sent > 0
    # Kept, not cut: every rollout running at the pause finishes whole after the resume.
    assert [(o["finish_reason"], len(o["token_ids"])) for o in outs] == [("length", TOKENS)] * N
    # No request after the weights reuses prefix KV computed with the old ones.
    assert after["num_cached_tokens"] == 0, after
