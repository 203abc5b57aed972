"""At startup the plugin says in one line what it mounted and where (the routes it added, the
SGLang routes it replaced, its hooks, on which app in which process), and the replacements are the
routes actually served; it warns when the control routes are open to the network without a key."""

import subprocess
import sys

import pytest

from contract.api import Api
from targets import REPO, free_port, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub")]

CONTRACT_ROUTES = [
    "POST /abort_requests",
    "GET /v1/loads",
    "POST /update_weight_version",
    "POST /partial_generate",
    "POST /pause",
    "POST /resume",
    "GET /is_paused",
]


def _line(log: str, prefix: str) -> str:
    lines = [line for line in log.splitlines() if prefix in line]
    assert len(lines) == 1, f"expected one {prefix!r} line in the server log:\n{log}"
    return lines[0]


async def test_startup_log_says_in_one_line_what_is_mounted_where(target):
    log = target.log_tail()
    line = _line(log, "contract mounted")
    assert line == _line(log, "added routes:") == _line(log, "replaced SGLang routes:"), "one line says it all"
    added = line.split("added routes:")[1].split(";")[0]
    for route in [*CONTRACT_ROUTES, "GET /v1/engine_plugins"]:
        assert route in added
    replaced = line.split("replaced SGLang routes:")[1].split(";")[0]
    assert "GET /v1/loads (" in replaced and "POST /update_weight_version (" in replaced
    assert "http_server.update_weight_version" in replaced and ".get_loads" in replaced
    assert "SGLang 0.5.23" in line and "http_server.app (the app launch_server serves) in pid " in line
    assert "TokenizerManager." in line and "http_server.launch_server" in line and "settings {" in line
    assert len([x for x in log.splitlines() if "engine_plugins: SGLang 0.5.23" in x and "contract mounted" in x]) == 1


async def test_the_replaced_routes_are_the_ones_served(target):
    async with Api(target) as api:
        loads = await api.loads()
        bump = await api.ok("POST", "/update_weight_version", {"new_version": loads["weight_version"]})
    # The contract's shapes, supersets of SGLang's: SGLang's /v1/loads has no in_flight, and its
    # /update_weight_version answers {"success", "message", "new_version"}.
    assert {"in_flight", "paused", "aggregate", "engine"} <= set(loads) and loads["engine"] == "sglang"
    assert "num_used_tokens" in loads["loads"][0], "SGLang's own per-rank fields are kept"
    version = loads["weight_version"]
    # A bump to the version in force is a no-op, and says so (SGLang's own answer is a success too).
    assert {k: bump[k] for k in ("success", "new_version", "previous_version", "aborted")} == {
        "success": True, "new_version": version, "previous_version": version, "aborted": 0}
    assert bump["message"] == f"already at {version}", bump


UNGUARDED = "served on 0.0.0.0 without an API key"
REFUSED = "does not support --tokenizer-worker-num 2"


def _refused_start_log(target, tmp_path, *args: str, env: dict | None = None) -> str:
    """Start a server like *target*'s with *args* (and *env*), which the plugin refuses before
    anything listens (``launch_server`` never runs); its log."""
    if target.name == "sglang":
        from tools.launcher.engine_server import EngineServer, EngineStartError

        server = EngineServer("sglang", REPO, log_path=tmp_path / "refused.log", extra_args=list(args), env=env)
        with pytest.raises(EngineStartError):
            server.start()  # stops the process tree before raising
        return server.log_path.read_text(errors="replace")
    done = subprocess.run([sys.executable, "-m", "fakes.sglang", "--port", str(free_port()), *args],
                          cwd=REPO, env=server_env(env), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    return done.stdout + done.stderr


def test_an_unguarded_network_address_is_warned_about_at_startup(target, tmp_path):
    # Refused by --tokenizer-worker-num 2 right after the warning, so nothing binds 0.0.0.0.
    log = _refused_start_log(target, tmp_path, "--host", "0.0.0.0", "--tokenizer-worker-num", "2")
    assert UNGUARDED in log and "ENGINE_PLUGINS_API_KEY" in log, log[-3000:]
    assert REFUSED in log, log[-3000:]


def test_a_key_or_loopback_means_no_warning(target, tmp_path):
    # The session's server: loopback, with a key.
    assert "without an API key" not in target.log_tail()
    guarded = _refused_start_log(target, tmp_path, "--host", "0.0.0.0", "--api-key", "k-1", "--tokenizer-worker-num", "2")
    assert REFUSED in guarded and "without an API key" not in guarded, guarded[-3000:]


def test_require_key_stops_a_keyless_server_at_startup_naming_the_variable(target, tmp_path):
    log = _refused_start_log(target, tmp_path, env={"ENGINE_PLUGINS_REQUIRE_KEY": "1"})
    assert "ENGINE_PLUGINS_REQUIRE_KEY is set but this server has no API key" in log, log[-3000:]
