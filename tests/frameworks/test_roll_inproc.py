"""ROLL's calls to the ``sglang.Engine`` its strategy holds in a Ray worker (in-process, no HTTP
route), unchanged, with the plugin loaded: ``tokenizer_manager.abort_request(rid)`` of one
rollout among several.

Source: alibaba/ROLL at 8eb27cc2dc34c4d1310b169d9b86d339004d811a (lines in
``frameworks/roll_sglang_strategy.py``).
"""

from __future__ import annotations

import asyncio

import pytest

from .inproc_checks import wait_unfinished
from .inproc_relay import Relay

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang-roll")]

N, TOKENS = 3, 300


def payload(i: int) -> dict:
    return {"input_ids": [1, 15, 27, 33, 41 + i], "rid": f"roll-{i}", "return_logprob": False,
            "sampling_params": {"max_new_tokens": TOKENS, "ignore_eos": True, "n": 1}}


async def test_rolls_abort_of_one_rid_ends_only_that_request_with_its_tokens(target):
    async with Relay(target.url, target.api_key) as relay:
        rollouts = [relay.start("generate_request", payload(i)) for i in range(N)]
        await wait_unfinished(relay, N, "num_unfinished")
        await relay.call("abort_requests", ["roll-0"])
        outs = await asyncio.gather(*rollouts)
    ended = [(o["finish_reasons"][0], len(o["output_token_ids"][0])) for o in outs]
    assert ended[0][0] == "abort" and 0 < ended[0][1] < TOKENS, ended
    assert ended[1:] == [("length", TOKENS)] * (N - 1), ended
