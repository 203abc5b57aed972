"""vLLM 0.33's changed pause, on the fake that follows it (``--pause-rejects-new``): in abort mode
the engine core rejects new requests until resume (503 ``engine_paused`` on vLLM's own routes).
A ``partial_generate`` that reaches an engine paused by the contract answers ``cancelled: true``
with its tokens; one that reaches an engine paused by anyone else (vLLM's ``/sleep``, which pauses
the scheduler itself, 0.34's ``/checkpoint/prepare``) answers 503, so that the client goes
elsewhere rather than wait for a resume the contract will not see. Never a 500. vLLM's own
``/pause``, even kept (``ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES=0``), calls the engine client's
``pause_generation``, which is the contract's pause (engines/vllm/drop_in.py). vLLM 0.33 has no CPU build: this fake and
the static probe are its tests."""

import httpx
import pytest

from contract.api import Api
from targets_vllm import fake_vllm_server

pytestmark = pytest.mark.anyio


async def test_a_partial_generate_rejected_by_an_engine_paused_outside_the_contract_is_a_503_not_a_500(tmp_path):
    # vLLM's /sleep (level 0: the scheduler's pause alone) pauses the engine core while the
    # contract is not paused: every contract request then reaches the paused engine core.
    env = {"ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES": "0"}
    with fake_vllm_server(tmp_path, "--pause-rejects-new", "--dev-mode", env=env) as target:
        async with Api(target) as api:
            assert (await api.post("/sleep", params={"level": 0, "mode": "abort"})).status_code == 200
            paused = await api.post("/partial_generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}})
            native = await api.post("/v1/completions", {"model": "fake-vllm", "prompt": [1, 2, 3], "max_tokens": 4})
            loads = await api.loads()
            await api.post("/resume")
            after = await api.ok("POST", "/partial_generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}})
    assert paused.status_code == 503 and "paused outside the contract" in paused.json()["error"]["message"]
    assert native.status_code == 503 and native.json()["error"]["type"] == "ServiceUnavailableError"
    assert loads["in_flight"] == 0
    assert after["finish_reason"] == "length" and len(after["output_ids"]) == 8


async def test_vllms_own_pause_kept_is_the_contracts_pause(tmp_path):
    env = {"ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES": "0"}
    with fake_vllm_server(tmp_path, "--pause-rejects-new", "--dev-mode", env=env) as target:
        async with Api(target) as api:
            assert (await api.post("/pause", params={"mode": "abort"})).json() == {"status": "paused"}
            paused = await api.ok("POST", "/partial_generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}})
            loads = await api.loads()
            assert (await api.post("/resume")).json() == {"status": "resumed"}
            after = await api.ok("POST", "/partial_generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}})
    assert paused["cancelled"] is True and paused["cancel_reason"] == "pause", paused
    assert loads["paused"] is True and loads["in_flight"] == 0
    assert after["finish_reason"] == "length" and len(after["output_ids"]) == 8


async def test_the_startup_log_names_the_version_and_the_paused_engine_shim(tmp_path):
    with fake_vllm_server(tmp_path, "--pause-rejects-new") as target:
        async with httpx.AsyncClient(base_url=target.url) as client:
            assert (await client.get("/health")).status_code == 200
        log = target.log_tail()
    assert "on vLLM 0.33.0+fake" in log
    assert "shims: abort pause: a request the engine core rejects as paused ends cancelled, with its tokens" in log
