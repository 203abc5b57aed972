"""SGLang held in-process, as verl and ROLL hold it: the framework's own call of the
TokenizerManager's ``pause_generation(mode="abort")`` gets what the plugin's
``/pause_generation`` gives. It returns once the requests past the gate are out (each with its
tokens so far), without SGLang's one-second poll, and the contract records the pause; its
``continue_generation`` is the contract's resume.

Each test runs ``inprocess_driver.py`` in an interpreter of its own (the plugin installs hooks on
SGLang's classes once per process) and reads its JSON.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from targets import REPO, TESTS

DRIVER = TESTS / "sglang" / "inprocess_driver.py"
RUNNING = 4


def _result(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the driver printed no result:\n{output[-5000:]}"
    return json.loads(lines[-1].removeprefix("RESULT "))


def _run(command: list[str], env: dict, timeout_s: float, before_exec=None) -> dict:
    """Run the driver in a process group of its own (SGLang's children included), stopped whatever happens."""
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, preexec_fn=before_exec)
    try:
        output, _ = process.communicate(timeout=timeout_s)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    assert process.returncode == 0 or "RESULT " in output, output[-5000:]
    result = _result(output)
    print(json.dumps(result))  # the figures, in the report of a failure (and with -s)
    return result


def _assert_pause_answered_as_the_route(result: dict) -> None:
    # SGLang's own pause polls with asyncio.sleep(1.0) while requests hold its update lock.
    assert result["poll_sleeps"] == [], f"SGLang's one-second poll was taken: {result}"
    assert result["pause_s"] < 0.6, result
    at_return = result["at_return"]
    assert at_return["in_rid_to_state"] == [] and at_return["is_pause"], result
    assert len(result["ended"]) == RUNNING
    for rid, ended in result["ended"].items():
        assert ended["finish_reason"] == "abort", (rid, result)
        assert ended["tokens"] >= ended["tokens_before_pause"] >= 2, (rid, result)
    assert result["contract_while_paused"] == {"is_paused": True, "mode": "abort", "in_flight": 0}, result
    assert not result["is_pause_after_continue"]
    assert result["after_continue"] == {"finish_reason": "length", "tokens": 8}, result
    assert result["contract_after_continue"] == {"is_paused": False, "mode": None, "in_flight": 0}, result


def test_verls_abort_pause_on_the_fake_held_in_process_returns_with_every_request_out():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINE_PLUGINS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS)])
    _assert_pause_answered_as_the_route(_run([sys.executable, str(DRIVER), "--fake"], env, 120))


@pytest.mark.real
def test_verls_abort_pause_on_sglang_0_5_23s_engine_held_in_process_returns_with_every_request_out(tmp_path):
    from tools.launcher.engine_server import EngineServer, ensure_engine

    paths = ensure_engine("sglang", REPO)
    # The server's flags and environment (the plugin on its path, the CPU profile), without its server.
    server = EngineServer("sglang", REPO, log_path=tmp_path / "engine.log")
    command = [str(paths.python), str(DRIVER), "--model-path", str(server.model_dir), *server.serving_flags()]
    _assert_pause_answered_as_the_route(_run(command, server.environment(), 600, server.cpu_profile.place_engine))
