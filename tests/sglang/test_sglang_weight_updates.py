"""SGLang's own weight-update routes, as the frameworks call them, with the plugin: on the SGLang
fake, and the first sequence on every real SGLang release too, with its random weights loaded
again (``load_format: dummy``); the same sequences with real weights, and the probe that proves
which are loaded, are tests/swap/test_sglang_swap.py.

The fake's scheduler answers as SGLang 0.5.23's does: an update's cache flush is refused while
requests run or are frozen in place (the update then answers 400 although the weights were
loaded), and a tensor update outside a weight-update session is refused. On 0.5.20 the first
sequence without the plugin kills the scheduler (docs/engine-notes.md).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contract.api import Api
from engine_versions import SUPPORTED
from frameworks.native import client, sglang_generate

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang-stub")]

RUNNING = 4


@pytest.fixture(scope="session")
def real_checkpoint():
    """A checkpoint of the real servers' tiny model with real weights (kept beside it)."""
    from tools.launcher.engine_server import engine_paths
    from targets import make_checkpoints

    paths = engine_paths("sglang")
    return make_checkpoints(paths.python, paths.model_dir, seeds=(3,))[0]


async def scheduler(http) -> dict:
    """The fake scheduler's weights, flush count and version."""
    return (await http.get("/fake/scheduler")).json()


@pytest.mark.targets("sglang-stub", "sglang", *(str(r) for r in SUPPORTED if r.engine == "sglang" and r.tested == "real"))
async def test_an_in_place_pause_and_a_stock_disk_update_answer_200_with_one_version_and_keep_the_requests(target, request):
    # AReaL's sequence (areal/engine/sglang_remote.py): in_place pause, update with SGLang's
    # defaults (flush_cache true), continue. A real server (random weights, which SGLang cannot
    # load again) loads a checkpoint of the same model with real weights.
    version = f"disk-{uuid.uuid4().hex[:8]}"
    checkpoint = str(request.getfixturevalue("real_checkpoint")) if target.real else "/checkpoints/b"
    async with Api(target) as api, client(target) as http:
        before = (await api.loads())["weight_version"]
        tasks = [sglang_generate(http, target.finish_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        (await http.post("/pause_generation", json={"mode": "in_place"})).raise_for_status()
        # load_format: SGLang's default is the server's own, dummy here.
        update = await http.post("/update_weights_from_disk", json={"model_path": checkpoint, "load_format": "auto",
                                                                    "weight_version": version})
        (await http.post("/continue_generation", json={})).raise_for_status()
        outputs = await asyncio.gather(*tasks)
        info = (await http.get("/model_info")).json()
        loads = await api.loads()
    assert update.status_code == 200, update.text
    assert "The cache flush was skipped" in update.json()["message"] and f"Weight version updated to {version}" in update.json()["message"]
    assert info["weight_version"] == loads["weight_version"] == version
    for out in outputs:
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "length" and meta["weight_version"] == version
        assert [s["version"] for s in meta["weight_versions"]] == [before, version]


async def test_the_fakes_scheduler_loaded_the_weights_without_the_flush_it_would_refuse(target):
    async with Api(target) as api, client(target) as http:
        flushes = (await scheduler(http))["flushes"]
        tasks = api.start(RUNNING, target.finish_tokens, prefix="fake-disk")
        await api.wait_in_flight(RUNNING, running=True)
        await api.ok("POST", "/pause", {"mode": "keep", "clear_cache": False})
        update = await http.post("/update_weights_from_disk", json={"model_path": "/checkpoints/b", "weight_version": "disk-b"})
        await api.ok("POST", "/resume")
        await asyncio.gather(*tasks)
        state = await scheduler(http)
    assert update.status_code == 200, update.text
    assert state == {"weights": "/checkpoints/b", "flushes": flushes, "weight_version": "disk-b"}


async def test_a_sessionless_tensor_update_gets_a_session_and_flushes_under_a_contract_keep_pause(target):
    async with Api(target) as api, client(target) as http:
        flushes = (await scheduler(http))["flushes"]
        tasks = api.start(RUNNING, target.finish_tokens, prefix="tensor")
        await api.wait_in_flight(RUNNING, running=True)
        await api.ok("POST", "/pause", {"mode": "keep"})  # SGLang's retract: the flush can run
        update = await http.post("/update_weights_from_tensor", json={"serialized_named_tensors": ["x"], "weight_version": "tensor-b"})
        await api.ok("POST", "/resume")
        results = await asyncio.gather(*tasks)
        state = await scheduler(http)
        session = await http.post("/begin_weight_update", json={})
        await http.post("/end_weight_update", json={})
    assert update.status_code == 200 and "opened and closed a weight-update session" in update.json()["message"], update.text
    assert state == {"weights": "tensors", "flushes": flushes + 1, "weight_version": "tensor-b"}
    assert session.status_code == 200, "the plugin closed the session it opened"
    for result in results:
        assert result["finish_reason"] == "length" and [s["version"] for s in result["weight_versions"]][-1] == "tensor-b"


async def test_an_update_that_arrives_unpaused_runs_at_once_while_the_requests_go_on(target):
    async with Api(target) as api, client(target) as http:
        tasks = api.start(RUNNING, target.long_tokens, prefix="unpaused")
        await api.wait_in_flight(RUNNING, running=True)
        update = await http.post("/update_weights_from_disk", json={"model_path": "/checkpoints/c", "weight_version": "disk-c"})
        loads = await api.loads()
        await api.ok("POST", "/abort_requests", {"wait": True})
        results = await asyncio.gather(*tasks)
    assert update.status_code == 200, update.text
    assert loads["in_flight"] == RUNNING and loads["paused"] is False
    for result in results:
        assert [s["version"] for s in result["weight_versions"]][-1] == "disk-c"


async def test_without_the_plugin_the_same_sequences_fail_as_on_sglang(target, tmp_path):
    # The fake's fidelity, and what the plugin fixes: SGLang's own answers to the two sequences.
    from targets import module_server

    with module_server(tmp_path, "fakes.sglang", "--no-plugin", "--step-s", "0.002") as server:
        async with client(target) as http:
            http.base_url = server.url
            tasks = [sglang_generate(http, 400) for _ in range(2)]
            while not (await http.get("/v1/loads")).json()["loads"][0]["num_running_reqs"]:
                await asyncio.sleep(0.01)
            (await http.post("/pause_generation", json={"mode": "in_place"})).raise_for_status()
            disk = await http.post("/update_weights_from_disk", json={"model_path": "/checkpoints/b", "weight_version": "b"})
            tensor = await http.post("/update_weights_from_tensor", json={"serialized_named_tensors": ["x"]})
            (await http.post("/continue_generation", json={})).raise_for_status()
            await asyncio.gather(*tasks)
    assert disk.status_code == 400 and "the cache was not flushed" in disk.json()["message"]
    assert tensor.status_code == 400 and "between begin_weight_update() and end_weight_update()" in tensor.json()["message"]
