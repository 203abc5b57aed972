"""AReaL's own calls to SGLang, unchanged, with the plugin loaded.

Source: inclusionAI/AReaL at commit 4aef98d8d818af55b43621aaadba047ae10f4e77,
``areal/engine/sglang_remote.py``:

- ``:69-89``: ``POST /generate`` with ``input_ids``, ``sampling_params`` and
  ``return_logprob: true``.
- ``:94-121``: reads ``meta_info["finish_reason"]["type"]`` and ``.get("message", "")``, and the
  tokens and logprobs from ``meta_info["output_token_logprobs"]`` (``x[1]``, ``x[0]``).
- ``:275, 279``: ``POST /pause_generation {}`` (SGLang's abort mode) and
  ``POST /continue_generation {}`` around a weight update.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api

from .native import client, sglang_generate

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub", "sglang-areal")]


def areal_reads(out: dict) -> tuple[str, str, list[int], list[float]]:
    """What ``sglang_remote.py:94-121`` takes from an answer."""
    meta_info = out["meta_info"]
    finish_reason = meta_info["finish_reason"]
    stop_reason = finish_reason["type"]
    stop_message = finish_reason.get("message", "")
    output_tokens = [x[1] for x in meta_info["output_token_logprobs"]]
    output_logprobs = [x[0] for x in meta_info["output_token_logprobs"]]
    return stop_reason, stop_message, output_tokens, output_logprobs


async def test_areals_pause_returns_with_every_running_request_out_and_continue_resumes(target):
    n = 4
    async with client(target) as http, Api(target) as api:
        tasks = [sglang_generate(http, target.long_tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        (await http.post("/pause_generation", json={})).raise_for_status()
        after_pause = await api.loads()
        outputs = await asyncio.gather(*tasks)
        (await http.post("/continue_generation", json={})).raise_for_status()
        fresh = await sglang_generate(http, 16)
    assert after_pause["in_flight"] == 0, "the pause answers once the running requests are out"
    for out in outputs:
        stop_reason, stop_message, tokens, logprobs = areal_reads(out)
        assert stop_reason == "abort" and isinstance(stop_message, str)
        assert 0 < len(tokens) == len(logprobs) < target.long_tokens
    stop_reason, _, tokens, _ = areal_reads(fresh)
    assert stop_reason == "length" and len(tokens) == 16
