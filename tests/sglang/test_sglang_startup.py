"""At startup the plugin logs the routes it added and the SGLang routes it replaced, and the
replacements are the routes actually served."""

import pytest

from contract.api import Api

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


async def test_startup_log_lists_added_and_replaced_routes(target):
    log = target.log_tail()
    added = _line(log, "engine_plugins: added routes:")
    for route in CONTRACT_ROUTES:
        assert route in added
    replaced = _line(log, "engine_plugins: replaced SGLang routes:")
    assert "GET /v1/loads (" in replaced and "POST /update_weight_version (" in replaced
    assert "http_server.update_weight_version" in replaced and ".get_loads" in replaced
    assert "SGLang 0.5.23" in _line(log, "contract mounted")


async def test_the_replaced_routes_are_the_ones_served(target):
    async with Api(target) as api:
        loads = await api.loads()
        bump = await api.ok("POST", "/update_weight_version", {"new_version": loads["weight_version"]})
    # The contract's shapes, supersets of SGLang's: SGLang's /v1/loads has no in_flight, and its
    # /update_weight_version answers {"success", "message", "new_version"}.
    assert {"in_flight", "paused", "aggregate", "engine"} <= set(loads) and loads["engine"] == "sglang"
    assert "num_used_tokens" in loads["loads"][0], "SGLang's own per-rank fields are kept"
    version = loads["weight_version"]
    assert bump == {"success": True, "new_version": version, "previous_version": version, "aborted": 0,
                    "message": f"Weight version updated to {version}"}
