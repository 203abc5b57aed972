"""Contract behaviours a real engine cannot produce on demand, shown on the stub engine over HTTP:
requests still tokenizing, a request slow to release, configuration through the environment."""

import asyncio
import subprocess
import sys

import httpx
import pytest

from contract.api import Api, assert_partial
from targets import API_KEY, free_port, stub_server

pytestmark = pytest.mark.anyio


async def test_abort_all_fences_requests_still_tokenizing(tmp_path):
    with stub_server(tmp_path, "--tokenize-s", "30") as target:
        async with Api(target) as api:
            tasks = api.start(5, 100, prefix="tokenizing")
            loads = await api.wait_in_flight(5)
            assert loads["aggregate"]["total_waiting_reqs"] == 5, "held requests count as waiting"
            result = await api.ok("POST", "/abort_requests", {"wait": True, "timeout_s": 60})
            results = await asyncio.gather(*tasks)
    assert result["aborted"] == 5 and result["idle"] is True
    assert all(r["cancelled"] and r["output_ids"] == [] for r in results)


async def test_abort_with_wait_times_out_when_requests_do_not_release(tmp_path):
    with stub_server(tmp_path, "--release-delay-s", "3") as target:
        async with Api(target) as api:
            tasks = api.start(3, 5000, prefix="slow")
            await api.wait_in_flight(3, running=True)
            result = await api.ok("POST", "/abort_requests", {"wait": True, "timeout_s": 0.2})
            assert result["timed_out"] is True and result["in_flight"] == 3 and result["idle"] is False
            assert result["aborted"] == 3
            # The server's log says which requests the abort left in flight, and in what state.
            assert "an abort with wait timed out after 0.2 s with 3 of its requests in flight" in target.log_tail()
            assert "slow-0 (engine id" in target.log_tail() and "dispatched, aborted by request" in target.log_tail()
            again = await api.ok("POST", "/abort_requests", {"wait": True, "timeout_s": 60})
            assert again == {"status": "aborted", "aborted": 0, "in_flight": 0, "idle": True, "timed_out": False}
            for r in await asyncio.gather(*tasks):
                assert r["cancelled"] is True
                assert_partial(r, 5000)


async def test_route_prefix_and_weight_version_default_come_from_the_environment(tmp_path):
    env = {"ENGINE_PLUGINS_ROUTE_PREFIX": "/rl", "ENGINE_PLUGINS_ABORT_ON_WEIGHT_VERSION": "true"}
    with stub_server(tmp_path, env=env) as target:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=target.url, headers=headers, timeout=60) as http:
            assert (await http.get("/v1/loads")).status_code == 404
            assert (await http.get("/rl/v1/loads")).status_code == 200
            task = asyncio.create_task(
                http.post("/rl/partial_generate", json={"input_ids": [1], "sampling_params": {"max_new_tokens": 5000}})
            )
            while (await http.get("/rl/v1/loads")).json()["in_flight"] < 1:
                await asyncio.sleep(0.01)
            bump = (await http.post("/rl/update_weight_version", json={"new_version": "v2"})).json()
            assert bump["aborted"] == 1
            assert (await task).json()["cancelled"] is True


async def test_an_engine_key_takes_precedence_over_engine_plugins_api_key(tmp_path):
    with stub_server(tmp_path, env={"ENGINE_PLUGINS_API_KEY": "plugin-key"}) as target:
        async with httpx.AsyncClient(base_url=target.url, timeout=60) as http:
            statuses = {key: (await http.post("/resume", headers={"Authorization": f"Bearer {key}"})).status_code
                        for key in ("plugin-key", API_KEY)}
    assert statuses == {"plugin-key": 401, API_KEY: 200}


def test_a_bad_variable_stops_startup_with_its_name():
    proc = subprocess.run(
        [sys.executable, "-m", "engine_plugins.engines.stub", "--port", str(free_port())],
        env={"ENGINE_PLUGINS_ABORT_TIMEOUT_S": "-1", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "ENGINE_PLUGINS_ABORT_TIMEOUT_S" in proc.stderr
