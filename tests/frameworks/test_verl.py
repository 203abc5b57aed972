"""verl's own calls to SGLang's HTTP server, unchanged, with the plugin loaded.

Source: volcengine/verl at commit b178a3cd56f58b2d502255daba591e92833930a7,
``verl/workers/rollout/sglang_rollout/http_server_engine.py``:

- ``:809-846``: ``generate`` posts ``/generate`` with ``text``, ``sampling_params``,
  ``input_ids``, ``return_logprob``, ..., the ``None`` values filtered out.
- ``:944-954``: ``abort_request`` posts ``/abort_request {"rid": rid, "abort_all": abort_all}``
  (both keys always: ``{"rid": "", "abort_all": true}`` aborts everything).
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api

from .native import client, sglang_generate

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub")]


async def test_verls_abort_all_with_an_empty_rid_aborts_everything_and_settles(target):
    n = 4
    async with client(target) as http, Api(target) as api:
        tasks = [sglang_generate(http, target.long_tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        response = await http.post("/abort_request", json={"rid": "", "abort_all": True})
        loads = await api.loads()
        outputs = await asyncio.gather(*tasks)
    assert response.status_code == 200 and response.json()["aborted"] == n
    assert loads["in_flight"] == 0
    for out in outputs:
        assert out["meta_info"]["finish_reason"]["type"] == "abort"
        assert len(out["meta_info"]["output_token_logprobs"]) > 0


async def test_verls_abort_of_one_rid_aborts_only_that_request(target):
    async with client(target) as http, Api(target) as api:
        # Not "req-1" and "req-10": SGLang's scheduler aborts every rid that starts with the one
        # sent (docs/sglang.md, Limits), which the plugin cannot change for native rids.
        mine = sglang_generate(http, target.long_tokens, rid="verl-req-a")
        other = sglang_generate(http, target.long_tokens, rid="verl-req-b")
        await api.wait_in_flight(2, running=True)
        response = await http.post("/abort_request", json={"rid": "verl-req-a", "abort_all": False})
        out = await mine
        loads = await api.loads()
        await http.post("/abort_request", json={"rid": "", "abort_all": True})
        await other
    assert response.json()["aborted"] == 1 and loads["in_flight"] == 1
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
