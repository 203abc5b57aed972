"""The client over Ray's transport, fast: stub engines held in-process by actors with
:class:`ContractActor`, reached through a stand-in for Ray's actor handle (tests/ray_fleet/fake_ray.py;
the real Ray's runs are tests/ray_fleet/test_ray_actors.py). Every fleet operation, a fleet of
actors and HTTP servers mixed, the failures a handle brings (a dead, restarting, hung or raising
actor), and the partial-rollout scenario across a weight swap."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine_plugins.client import Fleet, ServerClient, ServerError
from engine_plugins.client import ray_transport
from engine_plugins.engines.stub.engine import StubEngine
from engine_plugins.inprocess import ContractActor

from ray_fleet.fake_ray import FakeActorHandle, fake_ray_module
from ray_fleet.scenario import run_scenario

from .conftest import KEY
from .helpers import start_generations, wait_in_flight
from .servers import stub_process

pytestmark = pytest.mark.anyio


class StubActor(ContractActor):
    """A user's actor: it holds a stub engine as ``self.engine``, nothing else added."""

    def __init__(self, step_s: float = 0.004) -> None:
        self.engine = StubEngine(step_s=step_s)


def handles(n: int, step_s: float = 0.004) -> list[FakeActorHandle]:
    """*n* actors' handles, each actor with its own stub engine."""
    return [FakeActorHandle(StubActor(step_s)) for _ in range(n)]


async def test_every_fleet_operation_over_ray(anyio_backend):
    actors = handles(2)
    async with Fleet(actors) as fleet:
        names = [s.url for s in fleet.servers]
        assert names == [f"ray://{h._actor_id.hex()}" for h in actors]
        detected = await fleet.detect()
        assert detected.ok and all(r.value.flavor.value == "contract" and r.value.engine == "stub" for r in detected.results)
        assert [r.url for r in detected.results] == names and detected.results[0].api == "engine-plugins contract on stub"
        assert all(r.value.idle for r in (await fleet.loads()).results)

        gens = {s.url: start_generations(s, 3, prefix=f"g{i}") for i, s in enumerate(fleet.servers)}
        for s in fleet.servers:
            await wait_in_flight(s, 3)
        aborted = await fleet.abort(wait=True, timeout_s=30)
        assert aborted.ok and [r.value.aborted for r in aborted.results] == [3, 3], aborted.to_dict()
        for tasks in gens.values():
            partials = await asyncio.gather(*tasks)
            assert all(p.cancelled and len(p.output_ids) >= 1 for p in partials)

        bumped = await fleet.update_weight_version("v1")
        assert bumped.ok and all(r.value.new_version == "v1" for r in bumped.results)
        gens = start_generations(fleet.servers[0], 2, prefix="stale")
        await wait_in_flight(fleet.servers[0], 2)
        assert (await fleet.update_weight_version("v2")).ok
        fenced = await fleet.abort_stale(max_staleness=1, wait=True, timeout_s=30)
        assert fenced.ok and [r.value.aborted for r in fenced.results] == [2, 0], fenced.to_dict()
        assert all(p.cancel_reason == "stale" for p in await asyncio.gather(*gens))

        gens = start_generations(fleet.servers[1], 2, prefix="drain")
        await wait_in_flight(fleet.servers[1], 2)
        drained = await fleet.abort_until_idle(timeout_s=30)
        assert drained.ok and all(r.value.idle for r in drained.results) and drained.results[1].value.aborted == 2
        await asyncio.gather(*gens)

        paused = await fleet.pause("keep")
        assert paused.ok and all(r.value.is_paused and r.value.mode == "keep" for r in paused.results)
        assert all(r.value.is_paused for r in (await fleet.is_paused()).results)
        resumed = await fleet.resume()
        assert resumed.ok and not any(r.value.is_paused for r in resumed.results)

        async with fleet.weight_swap("v3", mode="abort") as swap:
            assert swap.began.ok and all(r.value.is_paused for r in (await fleet.is_paused()).results)
        assert swap.committed.ok and all(r.value.version == "v3" for r in swap.committed.results)
        began = await fleet.begin_weight_swap("v4")
        assert began.ok
        committed = await fleet.commit_weight_swap("v4", began=[names[0]])
        assert committed.results[0].ok and committed.results[1].kind == "unsupported"
        assert (await fleet.commit_weight_swap("v4", began=[names[1]])).results[1].ok
        loads = await fleet.loads()
        assert [r.value.weight_version for r in loads.results] == ["v4", "v4"] and not any(r.value.paused for r in loads.results)

        result = await fleet.servers[0].partial_generate([5, 6, 7], {"max_new_tokens": 5})
        assert result.finish_reason == "length" and len(result.output_ids) == 5 and result.weight_versions[0].version == "v4"
    # Everything went through the one method, with the contract's header and no key.
    name, (method, path, body, params, headers) = actors[0].calls[0]
    assert name == "engine_plugins_http" and (method, path) == ("GET", "/v1/loads") and body is None
    assert headers == {"X-Engine-Plugins-Contract": "1"} or "authorization" not in {k.lower() for k in headers}


async def test_a_fleet_of_an_http_server_and_an_actor(tmp_path):
    with stub_process(tmp_path, "--step-s", "0.004", api_key=KEY) as served:
        [actor] = handles(1)
        async with Fleet([served.url, actor], api_key=KEY) as fleet:
            assert [s.url for s in fleet.servers] == [served.url, f"ray://{actor._actor_id.hex()}"]
            tasks = [start_generations(s, 2, prefix=f"mixed{i}") for i, s in enumerate(fleet.servers)]
            for s in fleet.servers:
                await wait_in_flight(s, 2)
            drained = await fleet.abort_until_idle(timeout_s=30)
            assert drained.ok and [r.value.aborted for r in drained.results] == [2, 2], drained.to_dict()
            partials = [p for ts in tasks for p in await asyncio.gather(*ts)]
            assert len(partials) == 4 and all(p.cancelled for p in partials)
            assert (await fleet.update_weight_version("mixed-v1")).ok
            async with fleet.weight_swap("mixed-v2") as swap:
                assert swap.began.ok
            assert swap.committed.ok
            loads = await fleet.loads()
            assert [r.value.weight_version for r in loads.results] == ["mixed-v2", "mixed-v2"]
            assert [r.api for r in loads.results] == ["engine-plugins contract on stub"] * 2


async def test_the_partial_rollout_scenario_on_stub_engines_in_actors(anyio_backend):
    actors = handles(2, step_s=0.005)
    async with Fleet(actors) as fleet:
        report = await run_scenario(fleet, per_server=3, max_new_tokens=200, settle_s=0.1, prompt_tokens=12)
    assert report["problems"] == [], report
    assert all(r["tokens_at_cancel"] >= 1 and r["tokens"] == 200 for r in report["rollouts"])
    # Each continuation was sent from its tokens: the prompt and every token kept at the cancel.
    sent = [json.loads(args[2]) for h in actors for name, args in h.calls if args[1] == "/partial_generate"]
    continued = sorted(len(b["input_ids"]) - 12 for b in sent if b["request_id"].endswith("-1"))
    assert continued == sorted(r["tokens_at_cancel"] for r in report["rollouts"])
    assert all(b["sampling_params"]["max_new_tokens"] == 200 - (len(b["input_ids"]) - 12) for b in sent)


async def test_a_server_error_keeps_the_servers_message(anyio_backend):
    [actor] = handles(1)
    async with ServerClient(actor) as server:
        with pytest.raises(ServerError) as err:
            await server.abort_stale(admitted_before="never-was")
    assert err.value.kind == "http" and err.value.status == 400 and "never-was" in err.value.message
    assert err.value.url == server.url


@pytest.fixture
def fake_ray(monkeypatch):
    """Ray's exception classes where the transport looks for them."""
    modules = fake_ray_module()
    for name, module in modules.items():
        monkeypatch.setitem(__import__("sys").modules, name, module)
    monkeypatch.setattr(ray_transport, "_ERRORS", None)
    yield modules["ray"]
    ray_transport._ERRORS = None


async def test_a_dead_a_restarting_and_a_raising_actor_are_per_server_failures(fake_ray):
    dead, restarting, raising, alive = handles(4)
    dead.fail_with = fake_ray.exceptions.RayActorError("The actor died unexpectedly before finishing this task.\nmore")
    restarting.fail_with = fake_ray.exceptions.ActorUnavailableError("The actor is temporarily unavailable")
    raising.fail_with = fake_ray.exceptions.RayTaskError("ray::StubActor.engine_plugins_http()\nAttributeError: no engine")
    async with Fleet([dead, restarting, raising, alive]) as fleet:
        result = await fleet.loads()
    kinds = [r.kind for r in result.results]
    assert kinds == ["unreachable", "disconnected", "unsupported", None], result.to_dict()
    assert "the actor is gone (The actor died unexpectedly" in result.results[0].error
    assert "AttributeError: no engine" in result.results[2].error
    # A lost idempotent call is sent once more (two GETs), then the first failure stands.
    assert len(restarting.calls) == 2


async def test_a_hung_actor_times_out_and_its_call_is_cancelled(anyio_backend):
    hung, alive = handles(2)
    async with Fleet([hung, alive]) as fleet:
        await fleet.detect()
        hung.hang = True
        result = await fleet.abort(timeout_s=0.5)
    assert result.results[0].kind == "timeout" and "no answer within" in result.results[0].error
    assert result.results[1].ok
    await asyncio.sleep(0)
    assert hung.cancelled, "the call the client gave up on is still running in the actor"


async def test_a_handle_without_the_contract_method_is_refused():
    class Plain:
        async def generate(self):
            return None

    with pytest.raises(TypeError, match="ContractActor"):
        ServerClient(FakeActorHandle(Plain()))
