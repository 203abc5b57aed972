"""vLLM 0.34's process checkpoint (``/checkpoint/prepare|restore|status``, mounted by
``--enable-sleep-mode`` outside dev mode) and ``EngineFaultedError``, on the fake that follows
0.34 (``--like-0.34``). vLLM 0.34 has no CPU build: this fake and the static probe are its tests.

With the plugin the checkpoint routes need the server's key, and a checkpoint and the contract's
pause never leave each other's state wrong: a prepare is refused while the contract holds its
pause (it would drain the frozen requests and leave the contract's resume refused), and a
contract pause is refused while a checkpoint is prepared (vLLM could not resume under it).
"""

import asyncio

import httpx
import pytest

from contract.api import Api
from targets_vllm import fake_vllm_server

pytestmark = pytest.mark.anyio

LONG = 400  # tokens: about 1.2 s on the fake, long enough to pause around
SAMPLING = {"max_new_tokens": LONG, "ignore_eos": True}


@pytest.fixture
def server(tmp_path):
    with fake_vllm_server(tmp_path, "--like-0.34", "--enable-sleep-mode", name="vllm-0.34-stub") as target:
        yield target


async def test_the_checkpoint_routes_need_the_servers_key(server):
    async with httpx.AsyncClient(base_url=server.url) as anonymous:
        for method, path in (("POST", "/checkpoint/prepare"), ("POST", "/checkpoint/restore"), ("GET", "/checkpoint/status")):
            assert (await anonymous.request(method, path)).status_code == 401, path
    async with Api(server) as api:
        status = await api.http.get("/checkpoint/status")
        loads = await api.loads()
    assert status.status_code == 503 and status.json() == {"state": "running"}  # vLLM's answer: not prepared
    assert loads["paused"] is False, "the anonymous prepare drained nothing"


async def test_a_prepare_is_refused_while_the_contract_holds_its_pause_and_the_held_request_continues(server):
    async with Api(server) as api:
        held = asyncio.create_task(api.ok("POST", "/partial_generate", {"input_ids": [5, 6, 7], "sampling_params": SAMPLING}))
        await api.wait_in_flight(1, running=True)
        await api.ok("POST", "/pause", {"mode": "keep"})
        refused = await api.post("/checkpoint/prepare")
        status = await api.http.get("/checkpoint/status")
        await api.ok("POST", "/resume")
        answer = await held
        prepared = await api.post("/checkpoint/prepare")
        prepared_status = await api.http.get("/checkpoint/status")
        await api.ok("POST", "/checkpoint/restore")
    assert refused.status_code == 400 and "contract's pause" in refused.json()["error"]
    assert status.json()["state"] == "running"
    assert answer["cancelled"] is False and len(answer["output_ids"]) == LONG, "the frozen request went on to its end"
    assert prepared.status_code == 200 and prepared_status.status_code == 200 and prepared_status.json()["state"] == "prepared"


async def test_a_contract_pause_is_refused_while_a_checkpoint_is_prepared_and_accepted_after_the_restore(server):
    async with Api(server) as api:
        assert (await api.post("/checkpoint/prepare")).json()["state"] == "prepared"
        refused = await api.post("/pause", {"mode": "keep"})
        paused_state = await api.ok("GET", "/is_paused")
        rejected = await api.post("/partial_generate", {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}})
        restored = await api.ok("POST", "/checkpoint/restore")
        await api.ok("POST", "/pause", {"mode": "keep"})
        await api.ok("POST", "/resume")
        after = await api.generate(8)
    assert refused.status_code == 409 and "checkpoint is prepared" in refused.json()["error"]["message"]
    assert paused_state["is_paused"] is False, "the refused pause left no contract state behind"
    # Rejected by vLLM's drain, not by the contract: a 503, so that a client goes elsewhere.
    assert rejected.status_code == 503 and "paused outside the contract" in rejected.json()["error"]["message"]
    assert restored["state"] == "running"
    assert after["finish_reason"] == "length" and len(after["output_ids"]) == 8


async def test_an_unhealthy_engine_refuses_new_requests_with_503_and_serves_once_healthy(server):
    async with Api(server) as api:
        await api.ok("POST", "/fake/engine_fault", {"faulted": True})
        refused = await api.post("/partial_generate", {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}})
        await api.ok("POST", "/fake/engine_fault", {"faulted": False})
        after = await api.generate(4)
    assert refused.status_code == 503 and "engine is faulted" in refused.json()["error"]["message"]
    assert len(after["output_ids"]) == 4
