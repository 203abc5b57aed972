"""The engine as the frameworks launch it serves the contract: SGLang spawned as a
``multiprocessing`` child running ``launch_server`` by slime's, miles' and NeMo-RL's launch code
(``frameworks/spawned_sglang.py``), where the plugin once mounted nothing and a bare version bump
aborted every request again. The pinned server and its fake, started by hand, run the same tests.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contract.api import Api

from .native import client, sglang_generate

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub", "sglang-spawned")]


async def test_the_contract_is_mounted_in_the_process_that_serves(target):
    async with Api(target) as api:
        paused = await api.http.get("/is_paused")
        loads = await api.loads()
    assert paused.status_code == 200 and paused.json()["is_paused"] is False, paused.text
    assert "in_flight" in loads, "/v1/loads is SGLang's own: the contract is not mounted"
    if target.real:
        assert "contract mounted" in target.log_tail(), "the startup log does not say the contract is mounted"


async def test_a_bare_version_bump_keeps_every_request_in_flight(target):
    n, version = 6, f"bare-{uuid.uuid4().hex[:8]}"
    async with client(target) as http, Api(target) as api:
        tasks = [sglang_generate(http, target.finish_tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        # SGLang's own default aborts every request here (abort_all_requests=True).
        response = await http.post("/update_weight_version", json={"new_version": version})
        response.raise_for_status()
        outs = await asyncio.gather(*tasks)
    assert response.json()["success"] is True
    assert [o["meta_info"]["finish_reason"]["type"] for o in outs] == ["length"] * n
    assert all(o["meta_info"]["weight_version"] == version for o in outs), "later tokens carry the new version"
