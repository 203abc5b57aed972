"""miles' own calls to SGLang, unchanged, with the plugin loaded.

Source: radixark/miles at commit 31f1ca961a94cb860cec3b2dea34ec332bfa8f76:

- ``miles/ray/multi_lora/backend.py:178-187``: a LoRA adapter's requests are aborted on every
  worker with ``POST /abort_request {"rid": f"{adapter}{RID_SEPARATOR}", "prefix": true}``;
  ``RID_SEPARATOR`` is ``"::"`` and an adapter's rids are ``f"{adapter}::{uuid4().hex}"``
  (``miles/utils/multi_lora.py:27, 184``). SGLang 0.5.23 ignores ``prefix`` and does nothing.
- ``miles/backends/sglang_utils/sglang_engine.py:623-648``: ``POST /pause_generation
  {"mode": mode}`` (default ``"retract"``), ``POST /continue_generation {}``, both
  ``raise_for_status``; ``update_weight_version`` posts ``{"new_version": v,
  "abort_all_requests": false}`` and reads SGLang's ``{success, message, new_version}``.
- ``miles/rollout/sglang_rollout.py:408``: ``POST /abort_request {"abort_all": true}``.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contract.api import Api

from .native import adapter_rid, client, sglang_generate

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub", "sglang-spawned")]

RID_SEPARATOR = "::"


async def test_miles_prefix_abort_aborts_exactly_that_adapters_requests_and_counts_them(target):
    async with client(target) as http, Api(target) as api:
        mine = [sglang_generate(http, target.long_tokens, rid=adapter_rid("math")) for _ in range(2)]
        # "math-v2::..." and "mathematics::..." share the letters but not the prefix "math::".
        others = [sglang_generate(http, target.long_tokens, rid=adapter_rid(a)) for a in ("code", "math-v2", "mathematics")]
        await api.wait_in_flight(5, running=True)
        response = await http.post("/abort_request", json={"rid": f"math{RID_SEPARATOR}", "prefix": True})
        response.raise_for_status()
        aborted = await asyncio.gather(*mine)
        loads = await api.loads()
        assert not any(t.done() for t in others), "other adapters' requests go on"
        await (await http.post("/abort_request", json={"abort_all": True})).aread()
        rest = await asyncio.gather(*others)
    assert response.json()["aborted"] == 2 and response.json()["in_flight"] == 3
    assert loads["in_flight"] == 3
    for out in aborted:
        assert out["meta_info"]["finish_reason"]["type"] == "abort"
    for out in rest:
        assert out["meta_info"]["finish_reason"]["type"] == "abort"


async def test_a_prefix_abort_that_names_no_prefix_is_a_400_saying_so(target):
    async with client(target) as http, Api(target) as api:
        [task] = [sglang_generate(http, target.long_tokens, rid=adapter_rid("math"))]
        await api.wait_in_flight(1)
        refused = await http.post("/abort_request", json={"rid": "", "prefix": True})
        loads = await api.loads()
        await http.post("/abort_request", json={"abort_all": True})
        await task
    assert refused.status_code == 400 and "prefix" in refused.json()["error"]["message"]
    assert loads["in_flight"] == 1, "a refused abort aborts nothing"


async def test_miles_version_bump_keeps_in_flight_requests_and_answers_sglangs_fields(target):
    version = f"miles-{uuid.uuid4().hex[:8]}"
    async with client(target) as http, Api(target) as api:
        task = sglang_generate(http, target.long_tokens)
        await api.wait_in_flight(1, running=True)
        response = await http.post("/update_weight_version", json={"new_version": version, "abort_all_requests": False})
        response.raise_for_status()
        still = await api.loads()
        await http.post("/abort_request", json={"abort_all": True})
        out = await task
    body = response.json()
    assert body["success"] is True and body["new_version"] == version
    assert body["message"] == f"Weight version updated to {version}"
    assert still["in_flight"] == 1 and still["weight_version"] == version
    assert out["meta_info"]["weight_version"] == version, "later tokens carry the new version"


async def test_miles_retract_pause_and_continue_let_running_requests_finish(target):
    tokens = target.long_tokens // 4
    async with client(target) as http, Api(target) as api:
        tasks = [sglang_generate(http, tokens) for _ in range(3)]
        await api.wait_in_flight(3, running=True)
        (await http.post("/pause_generation", json={"mode": "retract"})).raise_for_status()
        paused = await api.loads()
        assert not any(t.done() for t in tasks), "retract keeps the requests"
        (await http.post("/continue_generation", json={})).raise_for_status()
        outputs = await asyncio.gather(*tasks)
    assert paused["in_flight"] == 3
    for out in outputs:
        assert out["meta_info"]["finish_reason"]["type"] == "length"
        assert len(out["meta_info"]["output_token_logprobs"]) == tokens
