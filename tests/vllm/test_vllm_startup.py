"""Startup on vLLM: with several API server processes each one serves the contract and says which
process it is; where vLLM's dev-mode RL routes exist (VLLM_SERVER_DEV_MODE=1) the log says which
ones the contract replaces; a missing engine-core half stops startup naming VLLM_PLUGINS."""

import asyncio
import subprocess
import sys

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
