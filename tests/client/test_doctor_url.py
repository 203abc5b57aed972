"""``engine-plugins doctor --url``: a running server's ``GET /v1/engine_plugins`` read back (what
the plugin mounted, where, on which engine), a server without it named from its own routes, and
an unreachable one: each with its exit code."""

import json

import httpx
import pytest

from engine_plugins.cli import exit_codes, main
from engine_plugins.client.mounted import check_mounted
from engine_plugins.contract.schema import MountInfo

from .conftest import KEY


def doctor_json(capsys, url, *argv):
    code = main(["doctor", "--url", url, "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_a_stub_says_what_is_mounted(stub_fleet, capsys):
    url = stub_fleet[0].url
    code, data = doctor_json(capsys, url, "--api-key", KEY)
    assert code == exit_codes.OK and data["mounted"] is True and data["exit_code"] == 0
    info = MountInfo.model_validate(data["info"])
    assert info.engine == "stub" and info.plugin == "engine_plugins" and info.ready
    assert {"POST /abort_requests", "GET /v1/loads", "GET /v1/engine_plugins"} <= set(info.routes)
    assert info.processes[0].pid == info.pid and info.processes[0].seen
    assert info.settings["ENGINE_PLUGINS_API_KEY"] is None, "the stub's key is its own, not the plugin's"
    assert main(["doctor", "--url", url, "--api-key", KEY]) == exit_codes.OK
    table = capsys.readouterr().out
    assert "mounted: the contract is mounted on stub" in table and "GET /v1/engine_plugins" in table


def test_the_route_is_guarded_like_the_other_read_routes(stub_fleet, capsys):
    url = stub_fleet[0].url
    assert httpx.get(url + "/v1/engine_plugins", timeout=30).status_code == 401
    code, data = doctor_json(capsys, url, "--api-key", "wrong")
    assert code == exit_codes.FAILED and data["mounted"] is None and data["error"] == "unauthorized"


def test_sglang_without_the_plugin_is_named_and_not_mounted(fake_sglang, capsys):
    code, data = doctor_json(capsys, fake_sglang.url)
    assert code == exit_codes.PROBLEMS and data["mounted"] is False
    assert (data["engine"], data["engine_version"]) == ("sglang", "0.5.23")
    assert "does not have the contract mounted" in data["detail"] and "SGLANG_PLUGINS" in data["detail"]
    assert main(["doctor", "--url", fake_sglang.url]) == exit_codes.PROBLEMS
    assert "not mounted: the server at" in capsys.readouterr().out


def test_vllm_without_the_plugin_is_named_and_not_mounted(fake_vllm_no_dev, capsys):
    code, data = doctor_json(capsys, fake_vllm_no_dev.url)
    assert code == exit_codes.PROBLEMS and data["mounted"] is False and data["engine"] == "vllm"
    assert "VLLM_PLUGINS=engine_plugins" in data["detail"]


@pytest.mark.anyio
async def test_a_url_with_a_prefix_names_the_engine_from_its_root(fake_vllm_no_dev):
    # The contract's routes would be under the prefix; the engine's own are at its root.
    found = await check_mounted(fake_vllm_no_dev.url + "/rl")
    assert not found.mounted and found.engine == "vllm" and found.url.endswith("/rl")


def test_an_unreachable_server_is_a_clear_failure(unreachable_url, capsys):
    assert main(["doctor", "--url", unreachable_url]) == exit_codes.FAILED
    err = capsys.readouterr().err
    assert "cannot connect" in err and unreachable_url in err
    code, data = doctor_json(capsys, unreachable_url)
    assert code == exit_codes.FAILED and data["error"] == "unreachable"


def test_something_else_on_the_route_is_not_taken_for_the_plugin(failing_url, capsys):
    code, data = doctor_json(capsys, failing_url)
    assert code == exit_codes.FAILED and data["error"] == "http" and "engine core died" in data["detail"]
