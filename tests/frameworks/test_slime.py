"""slime's own calls to SGLang, unchanged, with the plugin loaded.

Source: THUDM/slime at commit 624b824a898ab0ec1fcb4d373004c7f3852bf515:

- ``slime/backends/sglang_utils/server_control.py:12-67``: ``num_requests_from_load`` and
  ``abort_server_until_idle``: ``POST /abort_request {"abort_all": true}``, then
  ``GET /v1/loads?include=core``; idle when the count is 0, otherwise sleep 3 s and go again.
- ``slime/backends/sglang_utils/sglang_engine.py:320-327``: ``GET /get_weight_version``, reads
  ``["weight_version"]``; ``:423-435``: ``POST /pause_generation {}`` and
  ``POST /continue_generation {}``, ``raise_for_status``.
- ``slime/rollout/sglang_rollout.py:176-208``: ``POST /generate`` with ``sampling_params``,
  ``return_logprob: true`` and ``input_ids``; reads ``meta_info["output_token_logprobs"]``
  (``[logprob, token_id, ...]``), ``meta_info`` and ``text``.

The loop below is slime's, with ``post``/``get`` on httpx (slime's ``http_utils``) and a count of
its rounds, so that the test sees what slime concludes and how many rounds it took.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from contract.api import Api

from .native import client, sglang_generate

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub", "sglang-spawned")]

ABORT_RETRY_INTERVAL_SECONDS = 3


def num_requests_from_load(load: Any) -> int:
    """slime's ``server_control.py:12-29``, verbatim."""
    if isinstance(load, list):
        return sum(num_requests_from_load(item) for item in load)

    if not isinstance(load, dict):
        return 0

    if "loads" in load:
        return num_requests_from_load(load["loads"])

    for key in ("num_reqs", "num_total_reqs", "total_reqs"):
        value = load.get(key)
        if isinstance(value, int):
            return value

    running = load.get("num_running_reqs", load.get("total_running_reqs"))
    waiting = load.get("num_waiting_reqs", load.get("total_waiting_reqs"))
    return (running if isinstance(running, int) else 0) + (waiting if isinstance(waiting, int) else 0)


async def abort_server_until_idle(http, retry_interval: float = ABORT_RETRY_INTERVAL_SECONDS) -> int:
    """slime's ``server_control.py:43-63``; returns the number of abort rounds it made."""
    attempt = 1
    while True:
        response = await http.post("/abort_request", json={"abort_all": True})
        response.raise_for_status()
        loads = await http.get("/v1/loads?include=core")
        loads.raise_for_status()
        num_requests = num_requests_from_load(loads.json())
        if num_requests <= 0:
            return attempt
        await asyncio.sleep(retry_interval)
        attempt += 1


async def test_slimes_abort_loop_declares_idle_in_one_round_with_nothing_left(target):
    n = 6
    async with client(target) as http, Api(target) as api:
        tasks = [sglang_generate(http, target.long_tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        rounds = await abort_server_until_idle(http)
        outputs = await asyncio.gather(*tasks)
        loads = await api.loads()
    assert rounds == 1, "SGLang's abort answers once the aborted requests are released"
    assert loads["in_flight"] == 0, "slime's idle is true: the server holds nothing"
    for out in outputs:
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "abort"
        # What slime reads off every answer, aborted ones included.
        assert isinstance(meta["weight_version"], str)
        tokens = [item[1] for item in meta["output_token_logprobs"]]
        logprobs = [item[0] for item in meta["output_token_logprobs"]]
        assert 0 < len(tokens) < target.long_tokens and len(logprobs) == len(tokens)
        assert isinstance(out["text"], str)


async def test_slimes_abort_loop_also_ends_requests_held_at_a_pause(target):
    n = 3
    async with client(target) as http, Api(target) as api:
        await api.ok("POST", "/pause", {"mode": "keep"})
        held = [sglang_generate(http, target.long_tokens) for _ in range(n)]
        await api.wait_in_flight(n)
        rounds = await abort_server_until_idle(http)
        outputs = await asyncio.gather(*held)
        await api.ok("POST", "/resume")
        loads = await api.loads()
    assert rounds == 1 and loads["in_flight"] == 0
    for out in outputs:
        assert out["meta_info"]["finish_reason"]["type"] == "abort"
        assert out["meta_info"]["output_token_logprobs"] == [] and isinstance(out["meta_info"]["weight_version"], str)


async def test_slime_reads_the_weight_version_from_get_weight_version(target):
    version = f"slime-{uuid.uuid4().hex[:8]}"
    async with client(target) as http, Api(target) as api:
        await api.ok("POST", "/update_weight_version", {"new_version": version})
        response = await http.get("/get_weight_version")
        response.raise_for_status()
        loads = await api.loads()
    assert response.json()["weight_version"] == version == loads["weight_version"]


async def test_slimes_pause_generation_aborts_running_requests_and_continue_lets_new_ones_run(target):
    n = 4
    async with client(target) as http, Api(target) as api:
        running = [sglang_generate(http, target.long_tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        paused = await http.post("/pause_generation", json={})
        paused.raise_for_status()
        after_pause = await api.loads()
        aborted = await asyncio.gather(*running)
        held = sglang_generate(http, 8)
        await api.wait_in_flight(1)
        assert not held.done(), "a request sent during the pause waits for continue_generation"
        resumed = await http.post("/continue_generation", json={})
        resumed.raise_for_status()
        finished = await held
    assert after_pause["in_flight"] == 0, "the pause answers once the running requests are out"
    assert paused.json()["message"] == "Generation paused successfully." and paused.json()["aborted"] == n
    for out in aborted:
        assert out["meta_info"]["finish_reason"]["type"] == "abort" and out["meta_info"]["output_token_logprobs"]
    assert finished["meta_info"]["finish_reason"]["type"] == "length"
    assert len(finished["meta_info"]["output_token_logprobs"]) == 8
