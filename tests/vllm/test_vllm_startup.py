"""Startup on vLLM: with several API server processes each one serves the contract and says which
process it is; where vLLM's dev-mode RL routes exist (VLLM_SERVER_DEV_MODE=1) the log says which
ones the contract replaces; a missing engine-core half stops startup naming VLLM_PLUGINS;
``python -m vllm.entrypoints.openai.api_server --api-server-count 2``, which vLLM serves from one
process, serves the contract as one."""

import asyncio
import subprocess
import sys

import httpx
import pytest

from engine_plugins.client.mounted import check_mounted
from targets import API_KEY, REPO, doctor_url, free_port, server_env

REPLACED = [f"{m} {p}" for m, p in
            [("POST", "/abort_requests"), ("POST", "/pause"), ("POST", "/resume"), ("GET", "/is_paused"), ("POST", "/update_weight_version")]]


@pytest.mark.targets("vllm-api2", "vllm-stub-api3")
def test_every_api_process_serves_the_contract_and_logs_the_dev_routes_it_replaces(target):
    count = 2 if target.name == "vllm-api2" else 3
    log = target.log_tail()
    # One line per API process says what it mounted, where, and which of vLLM's routes it replaced.
    lines = [line for line in log.splitlines() if "engine_plugins: serving the RL control contract on vLLM" in line]
    for index in range(count):
        said = [line for line in lines if f"API server {index} of {count}" in line]
        assert len(said) == 1, log[-3000:]
        replaced = said[0].split("replaced vLLM's routes:")[1].split(";")[0]
        assert all(route in replaced for route in REPLACED), said[0]
    # Loopback with a key: no warning about open control routes, and the key is never logged.
    assert "without an API key" not in log and API_KEY not in log, log[-3000:]


@pytest.mark.anyio
@pytest.mark.targets("vllm", "vllm-stub")
async def test_one_line_per_process_says_what_is_mounted_where_and_doctor_reads_it(target):
    found = await check_mounted(target.url, target.api_key)
    info = found.info
    assert found.mounted and info.engine == "vllm" and info.ready, found
    report = await asyncio.to_thread(doctor_url, target)
    assert report["exit_code"] == 0 and report["mounted"] and report["info"]["pid"] == info.pid, report
    assert "GET /v1/engine_plugins" in info.routes and [p.role for p in info.processes][1:] == ["engine core"]
    # The whole log: the "vllm" target's tail is its last lines only.
    log = target.process.log_path.read_text(errors="replace") if target.process is not None else target.log_tail()
    served = [line for line in log.splitlines() if "engine_plugins: serving the RL control contract on vLLM" in line]
    assert len(served) == 1 and f"in pid {info.pid} ({info.role})" in served[0], log[-3000:]
    assert "build_app()" in info.app or target.name != "vllm", info.app
    if target.real:
        # vLLM's engine-core process: its own line.
        core = [line for line in log.splitlines() if "engine_plugins: vLLM" in line and "engine core pid" in line]
        assert len(core) == 1 and "engine_plugins_request_counts" in core[0], log[-3000:]


@pytest.mark.targets("vllm-stub")
def test_an_unguarded_network_address_is_warned_about_and_a_missing_engine_core_half_stops_startup(target):
    # The fake runs init_state before it binds (as uvicorn does), and without the general
    # plugin's utility in the engine core init_state stops right after the warning, so nothing
    # listens on 0.0.0.0. The real vLLM binds its socket before the plugin's init_state, so it
    # is not started on 0.0.0.0 here.
    cmd = [sys.executable, "-m", "fakes.vllm", "--port", str(free_port()), "--host", "0.0.0.0", "--without-general-plugin"]
    done = subprocess.run(cmd, cwd=REPO, env=server_env(), capture_output=True, text=True, timeout=60)
    log = done.stdout + done.stderr
    assert done.returncode != 0, log[-3000:]
    assert "served on 0.0.0.0 without an API key" in log and "ENGINE_PLUGINS_API_KEY" in log, log[-3000:]
    assert "check that VLLM_PLUGINS names engine_plugins" in log, log[-3000:]


@pytest.mark.targets("vllm-stub")
def test_require_key_stops_a_keyless_server_at_startup_naming_the_variable(target):
    cmd = [sys.executable, "-m", "fakes.vllm", "--port", str(free_port())]
    done = subprocess.run(cmd, cwd=REPO, env=server_env({"ENGINE_PLUGINS_REQUIRE_KEY": "1"}), capture_output=True, text=True, timeout=60)
    log = done.stdout + done.stderr
    assert done.returncode != 0, log[-3000:]
    assert "ENGINE_PLUGINS_REQUIRE_KEY is set but this server has no API key" in log, log[-3000:]


# A real vLLM of its own (not a target): the module's one process, given a count vLLM ignores there.
@pytest.mark.real
def test_vllms_server_module_given_two_api_servers_serves_the_contract_from_its_one_process(tmp_path):
    from tools.launcher.engine_server import EngineServer

    with EngineServer("vllm", REPO, api_key=API_KEY, env={"VLLM_PLUGINS": "engine_plugins"}, extra_args=["--api-server-count", "2"],
                      module="vllm.entrypoints.openai.api_server", log_path=tmp_path / "vllm.log") as server:
        with httpx.Client(base_url=server.url, headers=server.headers(), timeout=60) as http:
            paused = http.post("/pause", json={"mode": "abort"})
            resumed = http.post("/resume")
            loads = http.get("/v1/loads")
        log = server.log_tail(1_000_000)
    assert paused.status_code == 200 and paused.json()["is_paused"] is True, paused.text
    assert resumed.status_code == 200 and loads.status_code == 200, (resumed.text, loads.text)
    assert "engine-plugins-api-server" not in loads.headers, "one process named as one of several"
    assert "serving the RL control contract" in log and "found no link" not in log, log[-3000:]
