"""The launcher's process placement (CPU profiles) and its logged command lines; the spawner's own
tests (servers that die with the process that started them) are in test_spawn.py."""

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


def test_the_logged_command_never_shows_a_key():
    from tools.launcher.spawn import shown_command

    command = ["python", "-m", "x", "--api-key", "k1", "--admin-api-key=k2", "--port", "1"]
    assert shown_command(command) == ["python", "-m", "x", "--api-key", "***", "--admin-api-key=***", "--port", "1"]
