"""vLLM 0.32 with patches/vllm-0.32.0-rl-control.patch applied and the plugin NOT loaded (dev
mode, for vLLM's own RL routes): its own routes behave as the patch's header says. The server
checks also run on vLLM 0.24.0 (verl's pin, refused by the plugin) with its patch, when named:
--target vllm@0.24.0-patched (make test-releases)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from engine_plugins.engines.probe import SourceResolver
from engine_plugins.engines.vllm.manifest import ENGINE_WEIGHT_VERSION, MANIFEST
from engine_versions import PATCHED_TARGETS, SUPPORTED, wheel_source

from .conftest import patched_overlay
from .native import Native

pytestmark = [pytest.mark.anyio, pytest.mark.patched_engine("vllm")]

# About 7 s of decoding with vLLM's tiny model: no request finishes while a test arranges things.
LONG = 1500
RL_ROUTES = [("POST", "/abort_requests"), ("POST", "/pause"), ("POST", "/resume"), ("GET", "/is_paused"),
             ("POST", "/update_weight_version"), ("GET", "/weight_info"), ("GET", "/v1/loads")]
# Where the engine keeps no weight version (the manifest's feature: vLLM 0.26 and older), vLLM
# has no routes for it (docs/engine-notes.md).
VERSION_ROUTES = {"/update_weight_version", "/weight_info"}


@functools.cache
def _keeps_weight_version(release) -> bool:
    """Whether *release*'s engine keeps a weight version: the static probe of its wheel."""
    return MANIFEST.probe(SourceResolver(wheel_source(release))).features[ENGINE_WEIGHT_VERSION]


def rl_routes(server) -> list[tuple[str, str]]:
    """The RL routes *server*'s release has."""
    versioned = _keeps_weight_version(server.release)
    return [(method, path) for method, path in RL_ROUTES if versioned or path not in VERSION_ROUTES]


async def test_the_plugin_is_not_loaded(patched_vllm):
    async with Native(patched_vllm) as vllm:
        response = await vllm.http.post("/partial_generate", json={"input_ids": [1]})
    assert response.status_code == 404, "the contract's route is the plugin's: it must be absent"


@pytest.mark.parametrize("key", [None, "wrong"], ids=["no-key", "wrong-key"])
async def test_the_rl_routes_need_the_api_key(patched_vllm, key):
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=patched_vllm.url, headers=headers, timeout=60) as http:
        routes = rl_routes(patched_vllm)
        answers = {path: (await http.request(method, path, json={})).status_code for method, path in routes}
        health = await http.get("/health")
    async with Native(patched_vllm) as vllm:
        paused = await vllm.ok("GET", "/is_paused")
    assert answers == {path: 401 for _, path in routes}
    assert health.status_code == 200, "unguarded routes stay open"
    assert paused == {"is_paused": False}, "the refused /pause did nothing"


async def test_abort_answers_the_requests_actually_aborted_and_loads_count_them(patched_vllm):
    tag = uuid.uuid4().hex[:8]
    async with Native(patched_vllm) as vllm:
        model = (await vllm.ok("GET", "/v1/models"))["data"][0]["id"]
        body = {"model": model, "prompt": [1, 15, 27, 33], "max_tokens": LONG, "ignore_eos": True}
        tasks = [asyncio.create_task(vllm.http.post("/v1/completions", json=body, headers={"X-Request-Id": f"{tag}-{i}"}))
                 for i in range(2)]
        running = await vllm.wait_counts("2 requests running", lambda running, waiting: running >= 2)
        loads = await vllm.ok("GET", "/v1/loads")
        # One known id and one unknown: vLLM answered 2 (the ids sent).
        by_id = await vllm.ok("POST", "/abort_requests", {"request_ids": [f"cmpl-{tag}-0-0", f"cmpl-{tag}-0", "cmpl-nobody-0"]})
        rest = await vllm.ok("POST", "/abort_requests", {})
        responses = await asyncio.gather(*tasks)
        idle = await vllm.wait_counts("the server idle", lambda running, waiting: running == waiting == 0)
        none_left = await vllm.ok("POST", "/abort_requests", {})
    assert running == (2, 0)
    assert loads["version"] == patched_vllm.release.version and loads["timestamp"] and len(loads["loads"]) == 1
    assert loads["loads"][0] == {"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 0, "num_total_reqs": 2}
    assert loads["aggregate"] == {"total_running_reqs": 2, "total_waiting_reqs": 0, "total_reqs": 2}
    assert (by_id, rest, none_left) == ({"status": "aborted", "aborted": 1},) * 2 + ({"status": "aborted", "aborted": 0},)
    assert idle == (0, 0)
    for response in responses:
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["finish_reason"] == "abort"
        assert 0 < response.json()["usage"]["completion_tokens"] < LONG


# The pinned release, and 0.30 for the form of the patch before 0.32 (no call_utility_all_async;
# 0.31's patch is the same code on its lines); and, when named, a refused release's (conftest).
WITH_VENV = [r for r in SUPPORTED if r.engine == "vllm" and (r.tested == "pinned" or r.version == "0.30.0")]
WITH_VENV += [r for r in PATCHED_TARGETS.values() if r.engine == "vllm"]


@pytest.mark.parametrize("release", WITH_VENV, ids=str)
def test_a_request_not_yet_in_the_engine_core_is_covered_by_abort_and_counted_as_waiting(release):
    """The patched AsyncLLM code of each release, in its own venv (vllm_fence_check.py): a real
    server cannot hold a request between generate() and its add long enough to abort it there."""
    overlay, python = patched_overlay("vllm", None if getattr(release, "tested", None) == "pinned" else release.version)
    env = {**os.environ, "PYTHONPATH": str(overlay)}
    result = subprocess.run([str(python), str(Path(__file__).with_name("vllm_fence_check.py"))], env=env,
                            capture_output=True, text=True, timeout=300, cwd=overlay)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    for how in ("by_id", "abort_all"):
        run = seen[how]
        assert run["counts_while_held"] == [[0, 1]], "counted as waiting while held"
        assert run["aborted"] == 1 and run["abort_again"] == 0, "counted once"
        # The abort follows the add to the engine core, never precedes it (where it would be lost).
        assert run["events"] == ["add ext-1-abcd1234", "abort ext-1-abcd1234"], run["events"]
        assert run["finish_reasons"] == ["abort"] and run["counts_after"] == [[0, 0]]
