"""The auth matrix on each engine: which keys open the contract's routes, for each way of
configuring them, on the engine's fake and on the real engine; keys never reach the log.

Each case starts its own server (the session's targets have one configuration: the engine's
``--api-key``, covered by ``test_auth.py``). Keys: E the engine's ``--api-key``, A SGLang's
``--admin-api-key``, P ``ENGINE_PLUGINS_API_KEY``.

- SGLang: its middleware runs before any route and applies its admin-optional rule, so with a
  key of its own SGLang decides (the admin key if set, else the API key) and P is refused; P
  alone opens the routes when SGLang has no key (docs/sglang.md).
- vLLM: its middleware guards only paths under ``/v1`` and friends (``/v1/loads`` among the
  contract's); the plugin checks every contract route itself, with the same rule: vLLM's keys
  when it has any, else P.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import httpx
import pytest

from targets import REPO, module_server

from .test_auth import ROUTES

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub", "vllm", "vllm-stub")]

E, A, P = "engine-key-3f9a", "admin-key-77c1", "plugin-key-0b2e"
WRONG = "not-any-key"


@dataclass
class Case:
    """One key configuration and the bearer keys it must accept and refuse (None: no header)."""

    name: str
    engine_args: list[str]
    plugin_key: Optional[str]
    accepted: list[str]
    refused: list[Optional[str]]
    real: bool = True
    """Also run on the real engine (each case there costs a server start)."""


CASES: dict[str, list[Case]] = {
    "sglang": [
        Case("plugin key only", [], P, accepted=[P], refused=[None, WRONG, E]),
        Case("admin, api and plugin keys", ["--api-key", E, "--admin-api-key", A], P, accepted=[A], refused=[None, WRONG, E, P]),
        Case("api and plugin keys", ["--api-key", E], P, accepted=[E], refused=[None, WRONG, P], real=False),
    ],
    "vllm": [
        Case("plugin key only", [], P, accepted=[P], refused=[None, WRONG, E], real=False),
        Case("engine and plugin keys", ["--api-key", E], P, accepted=[E], refused=[None, WRONG, P]),
    ],
}


def engine_of(target_name: str) -> str:
    return target_name.split("-")[0]


def cases_for(target_name: str) -> list[Case]:
    real = "-" not in target_name
    return [c for c in CASES[engine_of(target_name)] if c.real or not real]


@contextlib.contextmanager
def server_for(target_name: str, case: Case, tmp: Path) -> Iterator[tuple[str, Path]]:
    """A server like *target_name*'s, configured as *case* says: (url, log path)."""
    env = {"ENGINE_PLUGINS_API_KEY": case.plugin_key} if case.plugin_key else {}
    if target_name.endswith("-stub"):
        module = "fakes.sglang" if target_name.startswith("sglang") else "fakes.vllm"
        with module_server(tmp, module, *case.engine_args, env=env) as server:
            yield server.url, server.log_path
        return
    from tools.launcher.engine_server import EngineServer, ensure_engine

    ensure_engine(target_name, REPO)
    if target_name == "vllm":
        env["VLLM_PLUGINS"] = "engine_plugins"
    server = EngineServer(target_name, REPO, env=env, extra_args=case.engine_args, log_path=tmp / f"{target_name}-auth.log")
    with server:
        yield server.url, server.log_path


def bearer(key: Optional[str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


async def test_each_key_configuration_opens_the_routes_to_exactly_its_keys(target, tmp_path):
    seen = []
    for case in cases_for(target.name):
        with server_for(target.name, case, tmp_path) as (url, log):
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                for key in case.accepted:
                    for method, path, body in [("GET", "/v1/loads", None), ("GET", "/is_paused", None), ("POST", "/resume", None), ("POST", "/abort_requests", {})]:
                        response = await http.request(method, path, json=body, headers=bearer(key))
                        assert response.status_code == 200, (case.name, key, path, response.status_code, response.text)
                for key in case.refused:
                    for method, path in ROUTES:
                        response = await http.request(method, path, headers=bearer(key))
                        assert response.status_code == 401, (case.name, key, method, path, response.status_code, response.text)
                # A refused pause changed nothing.
                state = await http.get("/is_paused", headers=bearer(case.accepted[0]))
                assert state.json()["is_paused"] is False
            text = log.read_text(errors="replace")
        for key in (E, A, P):
            assert key not in text, f"{case.name}: a key was written to the engine's log"
        assert "without an API key" not in text, f"{case.name}: the unguarded warning on a guarded loopback server"
        seen.append(case.name)
    assert seen, "every engine has cases"

