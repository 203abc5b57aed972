"""Startup on vLLM: --api-server-count > 1 is refused with a clear message, and where vLLM's
dev-mode RL routes exist (VLLM_SERVER_DEV_MODE=1) the log says which ones the contract replaces.

One server start shows both: routes are attached in build_app, before init_state refuses."""

import subprocess
import sys

import pytest

from targets import API_KEY, REPO, free_port, server_env

pytestmark = pytest.mark.targets("vllm", "vllm-stub")

REFUSAL = "--api-server-count 2 is not supported"
REPLACED = [f"the contract's {m} {p} replaces vLLM's own route" for m, p in
            [("POST", "/abort_requests"), ("POST", "/pause"), ("POST", "/resume"), ("GET", "/is_paused"), ("POST", "/update_weight_version")]]


def _start_refused_real(tmp_path) -> str:
    from engine_plugins.launcher.engine_server import EngineServer, EngineStartError

    server = EngineServer("vllm", REPO, api_key=API_KEY, log_path=tmp_path / "refused.log",
                          env={"VLLM_PLUGINS": "engine_plugins", "VLLM_SERVER_DEV_MODE": "1"},
                          extra_args=["--api-server-count", "2"])
    with pytest.raises(EngineStartError):
        server.start()  # stops the process tree before raising
    return server.log_path.read_text(errors="replace")


def _start_refused_fake(tmp_path) -> str:
    cmd = [sys.executable, "-m", "fakes.vllm", "--port", str(free_port()),
           "--api-key", API_KEY, "--api-server-count", "2", "--dev-mode"]
    done = subprocess.run(cmd, cwd=REPO, env=server_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    return done.stdout + done.stderr


def test_api_server_count_above_one_is_refused_and_replaced_dev_routes_are_logged(target, tmp_path):
    log = _start_refused_real(tmp_path) if target.name == "vllm" else _start_refused_fake(tmp_path)
    assert REFUSAL in log and "Run with --api-server-count 1" in log, log[-3000:]
    for line in REPLACED:
        assert line in log, f"{line!r} not logged:\n{log[-3000:]}"
    # Loopback with a key: no warning about open control routes, and the key is never logged.
    assert "without an API key" not in log and API_KEY not in log, log[-3000:]


@pytest.mark.targets("vllm-stub")
def test_an_unguarded_network_address_is_warned_about_at_startup(target):
    # The fake runs init_state before it binds (as uvicorn does), and the refusal of
    # --api-server-count 2 comes right after the warning, so nothing listens on 0.0.0.0. The real
    # vLLM binds its socket before the plugin's init_state, so it is not started on 0.0.0.0 here.
    cmd = [sys.executable, "-m", "fakes.vllm", "--port", str(free_port()), "--host", "0.0.0.0", "--api-server-count", "2"]
    done = subprocess.run(cmd, cwd=REPO, env=server_env(), capture_output=True, text=True, timeout=60)
    log = done.stdout + done.stderr
    assert done.returncode != 0 and REFUSAL in log, log[-3000:]
    assert "served on 0.0.0.0 without an API key" in log and "ENGINE_PLUGINS_API_KEY" in log, log[-3000:]

