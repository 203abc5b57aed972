"""AReaL's own calls to SGLang, unchanged, with the plugin loaded.

Source: inclusionAI/AReaL at commit 4aef98d8d818af55b43621aaadba047ae10f4e77,
``areal/engine/sglang_remote.py``:

- ``:69-89``: ``POST /generate`` with ``input_ids``, ``sampling_params`` and
  ``return_logprob: true``.
- ``:94-121``: reads ``meta_info["finish_reason"]["type"]`` and ``.get("message", "")``, and the
  tokens and logprobs from ``meta_info["output_token_logprobs"]`` (``x[1]``, ``x[0]``).
- ``:275, 279``: ``POST /pause_generation {}`` (SGLang's abort mode) and
  ``POST /continue_generation {}`` around a weight update.

And to vLLM, started by its own server module (target ``vllm-areal``,
``frameworks/areal_vllm_server.py``), at the same commit:

- ``areal/engine/vllm_remote.py:51-64, 94-96``: ``POST /v1/completions`` with the prompt's token
  ids, ``return_tokens_as_token_ids: true``, ``logprobs: 0``, ``stream: false`` and its sampling
  settings (the defaults of ``GenerationHyperparameters``, ``areal/api/cli_args.py:162-233``,
  but ``ignore_eos``, so that lengths are exact on random weights).
- ``areal/engine/vllm_remote.py:98-127``: reads ``choices[0]["finish_reason"]``, the tokens from
  ``logprobs["tokens"]`` (``"token:<id>"``) and ``logprobs["token_logprobs"]``.
- ``areal/engine/vllm_remote.py:216-222`` and ``areal/infra/remote_inf_engine.py:1204-1218``:
  ``POST /areal_pause_generation {}`` and ``POST /areal_continue_generation {}`` to every server;
  after the pause it sleeps ``pause_grace_period``, 0 by default (``cli_args.py:2079-2084``).
- ``areal/infra/remote_inf_engine.py:784-852``: an aborted request is sent again, once AReaL
  continues, with its tokens appended to the prompt and ``max_tokens`` less by as many.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contract.api import Api

from .native import PROMPT_IDS, client, sglang_generate

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


def areal_vllm_generate(http, input_ids: list[int], max_new_tokens: int) -> asyncio.Task:
    """AReaL's ``POST /v1/completions`` (``vllm_remote.py:51-64, 94-96``), in the background; the
    task returns the JSON answer."""
    payload = {
        "top_p": 1.0,
        "top_k": int(1e8),
        "max_tokens": max_new_tokens,
        "temperature": 1.0,
        "stop_token_ids": [],
        "ignore_eos": True,
        "skip_special_tokens": True,
        "return_tokens_as_token_ids": True,
        "logprobs": 0,
        "use_beam_search": False,
        "stream": False,
        "prompt": list(input_ids),
    }

    async def run() -> dict:
        response = await http.post("/v1/completions", json=payload)
        assert response.status_code == 200, f"/v1/completions -> {response.status_code} {response.text}"
        return response.json()

    return asyncio.create_task(run())


def areal_vllm_reads(response: dict) -> tuple[str, list[int], list[float]]:
    """What ``vllm_remote.py:98-127`` takes from an answer: stop reason, tokens, logprobs."""
    meta_info = response["choices"][0]
    stop_reason = meta_info["finish_reason"]
    output_tokens = [int(t.split(":")[1]) for t in meta_info["logprobs"]["tokens"]]
    output_logprobs = meta_info["logprobs"]["token_logprobs"]
    return stop_reason, output_tokens, output_logprobs


@pytest.mark.targets("vllm-areal")
async def test_areals_vllm_pause_aborts_every_running_request_with_its_tokens_and_the_resent_ones_finish(target):
    # Seconds of generation, so that they run at the pause, and their rest is soon generated.
    n, tokens = 4, target.finish_tokens
    async with client(target) as http, Api(target) as api:
        tasks = [areal_vllm_generate(http, PROMPT_IDS, tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        paused = await http.post("/areal_pause_generation", json={})
        after_pause = await api.loads()  # AReaL's grace period is 0: it goes on at once
        aborted = [areal_vllm_reads(out) for out in await asyncio.gather(*tasks)]
        continued = await http.post("/areal_continue_generation", json={})
        # AReaL's agenerate loop: each one sent again with its tokens, for what is left.
        resent = await asyncio.gather(*(areal_vllm_generate(http, PROMPT_IDS + out, tokens - len(out))
                                        for _, out, _ in aborted))
    assert paused.status_code == 200 and paused.json() == {"success": True, "message": "Generation paused and all requests aborted"}
    assert continued.status_code == 200 and continued.json()["success"] is True
    assert after_pause["in_flight"] == 0, "the pause answers once the running requests are out"
    for stop_reason, out, logprobs in aborted:
        assert stop_reason == "abort" and 0 < len(out) == len(logprobs) < tokens
    for (_, out, _), answer in zip(aborted, resent):
        stop_reason, more, logprobs = areal_vllm_reads(answer)
        assert stop_reason == "length" and len(out) + len(more) == tokens and len(logprobs) == len(more)


@pytest.mark.targets("vllm-areal")
async def test_a_contract_version_bump_keeps_areals_running_vllm_completions(target):
    n, tokens, version = 3, target.finish_tokens, f"areal-{uuid.uuid4().hex[:8]}"
    async with client(target) as http, Api(target) as api:
        tasks = [areal_vllm_generate(http, PROMPT_IDS, tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        bump = await api.ok("POST", "/update_weight_version", {"new_version": version})
        assert not any(t.done() for t in tasks), "setup: a request ran out before the bump answered"
        outputs = [areal_vllm_reads(out) for out in await asyncio.gather(*tasks)]
        loads = await api.loads()
    assert bump["new_version"] == version and bump["aborted"] == 0
    assert loads["weight_version"] == version and loads["in_flight"] == 0
    for stop_reason, out, logprobs in outputs:
        assert stop_reason == "length" and len(out) == len(logprobs) == tokens
