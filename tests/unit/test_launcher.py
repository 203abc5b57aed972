"""The launcher's process placement: CPU profiles, and engines that die with the process that started them."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tools.launcher import cpu


def test_profiles_resolve_cores_on_the_machine_and_fill_in_the_engine_core():
    profile = cpu.PROFILES["engine-one-core"]
    cores = cpu.machine_cores()
    if len(cores) < 2:
        assert profile.resolve(profile.engine_cores) is None, "nothing to split on one core"
        return
    assert profile.resolve((0,)) == {cores[0]} and profile.resolve((-1,)) == {cores[-1]}
    env = profile.environment("vllm")
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == str(cores[0]) and env["OMP_NUM_THREADS"] == "1"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in profile.environment("sglang")


def test_an_unknown_profile_names_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv(cpu.PROFILE_ENV, "fastest")
    with pytest.raises(ValueError, match="ENGINE_PLUGINS_CPU_PROFILE='fastest'.*engine-one-core"):
        cpu.selected_profile()


def test_a_server_dies_with_the_process_that_started_it_even_when_that_one_is_killed():
    # A parent that starts a long-lived "server" the way EngineServer does, then is SIGKILLed:
    # no atexit runs, and only the parent-death signal can stop the child.
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import functools, subprocess, sys, time
        from tools.launcher import cpu
        from tools.launcher.engine_server import _in_child_before_exec
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                                 preexec_fn=functools.partial(_in_child_before_exec, cpu.PROFILES["engine-default"]))
        print(child.pid, flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "the child outlived its killed parent"


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_logged_command_never_shows_a_key():
    from tools.launcher.engine_server import shown_command

    command = ["python", "-m", "x", "--api-key", "k1", "--admin-api-key=k2", "--port", "1"]
    assert shown_command(command) == ["python", "-m", "x", "--api-key", "***", "--admin-api-key=***", "--port", "1"]
