"""verl's calls to the SGLang TokenizerManager its ``SGLangHttpServer`` actor holds (in-process,
no HTTP route), unchanged, with the plugin loaded: its partial-rollout abort
(``tokenizer_manager.pause_generation(PauseGenerationReqInput(mode="abort"))``) over running
rollouts, then ``continue_generation``.

Source: volcengine/verl (lines and commits in ``frameworks/verl_sglang_server.py``).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from .inproc_checks import wait_unfinished
from .inproc_relay import Relay

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang-verl")]

N, TOKENS = 4, 400


async def test_verls_abort_mode_pause_returns_at_once_with_the_rollouts_out_and_their_tokens(target):
    async with Relay(target.url, target.api_key) as relay:
        rollouts = [relay.start("generate", [1, 15, 27, 33, 41 + i], {"max_tokens": TOKENS, "ignore_eos": True}, f"verl-{i}")
                    for i in range(N)]
        await wait_unfinished(relay, N, "num_unfinished")
        started = time.monotonic()
        await relay.call("abort_all_requests")
        paused_s = time.monotonic() - started
        outs = await asyncio.gather(*rollouts)
        await relay.call("resume_generation")
        after = await relay.call("generate", [1, 15, 27], {"max_tokens": 4, "ignore_eos": True}, "verl-after")
    print(f"abort-mode pause returned in {paused_s:.3f} s")
    # Out, with the tokens each had: verl's client resubmits the prompt with them.
    assert [o["finish_reason"] for o in outs] == ["abort"] * N, outs
    assert all(0 < len(o["token_ids"]) < TOKENS for o in outs), [len(o["token_ids"]) for o in outs]
    # No one-second poll (SGLang's pause re-checks every 1.0 s while a request holds its lock).
    assert paused_s < 0.6, paused_s
    assert (after["finish_reason"], len(after["token_ids"])) == ("length", 4)
