"""The client against a real vLLM 0.32 WITHOUT the plugin, in dev mode (VLLM_SERVER_DEV_MODE=1):
detection, loads from its Prometheus gauges, abort-until-idle through its own routes, version
bump and pause/resume."""

import asyncio
from pathlib import Path

import httpx
import pytest

from engine_plugins.client import Fleet, ServerClient

from .helpers import wait_until

REPO = Path(__file__).resolve().parents[2]
KEY = "native-vllm-key"

pytestmark = [pytest.mark.anyio, pytest.mark.native_vllm]


@pytest.fixture(scope="module")
def native_vllm(tmp_path_factory):
    """A real vLLM with its dev-mode RL routes and no endpoint plugin (the allowlist names none)."""
    from tools.launcher.engine_server import EngineServer, ensure_engine

    ensure_engine("vllm", REPO)
    env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_PLUGINS": "no_such_plugin"}
    log = tmp_path_factory.mktemp("native-vllm") / "vllm.log"
    with EngineServer("vllm", REPO, api_key=KEY, env=env, log_path=log) as server:
        yield server


async def test_real_vllm_in_dev_mode_is_driven_through_its_own_routes(native_vllm):
    url, n = native_vllm.url, 6
    async with ServerClient(url, api_key=KEY) as server, httpx.AsyncClient(headers=native_vllm.headers(), timeout=300) as http:
        found = await server.detection()
        assert found.flavor.value == "vllm-native" and found.version == "0.32.0", found
        model = (await http.get(f"{url}/v1/models")).json()["data"][0]["id"]
        gens = [asyncio.create_task(http.post(f"{url}/v1/completions", json={
            "model": model, "prompt": "hello there", "max_tokens": 1500, "ignore_eos": True})) for _ in range(n)]
        await wait_until(f"{n} requests running (vLLM gauges)", lambda: _running(server, n, gens), deadline_s=120)
        # vLLM's gauges refresh only after engine steps: freeze the requests (keep) so that they
        # are surely still in flight when the client drains the server.
        paused = await server.pause("keep")
        async with Fleet([url], api_key=KEY) as fleet:
            result = await fleet.abort_until_idle(timeout_s=120)
        answers = [(await g).json() for g in gens]
        still_paused = await server.is_paused()
        resumed = await server.resume()
        bumped = await server.update_weight_version("native-v1")
        after = await server.is_paused()
    outcome = result.results[0].value
    aborted_answers = sum(1 for a in answers if a["choices"][0]["finish_reason"] == "abort")
    assert result.ok and outcome.idle and outcome.in_flight == 0, result.to_dict()
    assert outcome.aborted == aborted_answers >= 1, (outcome, [a["choices"][0]["finish_reason"] for a in answers])
    assert paused.is_paused and still_paused.is_paused is True, "a server paused before the drain stays paused"
    assert resumed.is_paused is False and after.is_paused is False
    assert bumped.new_version == "native-v1" and bumped.aborted == 0


async def _running(server, n, gens) -> bool:
    if all(g.done() for g in gens):
        raise AssertionError("setup: every generation finished before the test could pause them")
    return (await server.loads()).running >= n
