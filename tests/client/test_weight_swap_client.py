"""The client's weight swap: one server and a fleet (stub servers on loopback, and a server
without the plugin), begun, the trainer's work done inside, committed once on each server."""

import asyncio
import uuid

import pytest

from engine_plugins.client import Fleet, ServerClient

from .conftest import KEY
from .helpers import start_generations, wait_in_flight

pytestmark = pytest.mark.anyio


async def test_a_fleet_swap_keeps_the_requests_and_applies_the_version_once_on_every_server(stub_fleet):
    version = f"fleet-{uuid.uuid4().hex[:8]}"
    async with Fleet([s.url for s in stub_fleet], api_key=KEY) as fleet:
        tasks = [t for i, s in enumerate(fleet.servers) for t in start_generations(s, 2, max_new_tokens=400, prefix=f"swap{i}")]
        for s in fleet.servers:
            await wait_in_flight(s, 2)
        async with fleet.weight_swap(version, clear_cache=False) as swap:
            during = await fleet.is_paused()
        results = await asyncio.gather(*tasks)
        loads = await fleet.loads()
    assert swap.began.ok and all(r.value.state == "open" for r in swap.began.results)
    assert all(r.value.is_paused for r in during.results)
    assert swap.committed.ok and {r.value.version for r in swap.committed.results} == {version}
    assert all(r.value.weight_version == version for r in loads.results)
    for result in results:
        assert result.finish_reason == "length" and result.weight_versions[-1].version == version


async def test_a_swap_whose_body_raises_is_left_open_and_paused(stub_fleet):
    version = f"dies-{uuid.uuid4().hex[:8]}"
    async with ServerClient(stub_fleet[0].url, api_key=KEY) as server:
        with pytest.raises(RuntimeError):
            async with server.weight_swap(version, lease_s=60):
                raise RuntimeError("the trainer died mid-transfer")
        paused = await server.is_paused()
        committed = await server.commit_weight_swap(version)
    assert paused.is_paused is True
    assert committed.state == "committed" and committed.is_paused is False


async def test_a_server_without_the_plugin_is_unsupported_and_nothing_is_sent(fake_sglang):
    async with Fleet([fake_sglang.url]) as fleet:
        async with fleet.weight_swap("v1") as swap:
            pass
    [began] = swap.began.results
    assert not began.ok and began.kind == "unsupported" and "need the engine-plugins plugin" in began.error
    assert not swap.committed.results[0].ok
