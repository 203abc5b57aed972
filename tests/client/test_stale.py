"""Aborting stale requests from the client and the CLI: a fleet of stub servers under one
deadline, partial generations with max_staleness, and servers without the plugin, which refuse
the selector rather than abort everything."""

import asyncio
import json
import time
import uuid

import httpx
import pytest

from engine_plugins.cli import exit_codes, main
from engine_plugins.client import Fleet, ServerClient, ServerError

from .conftest import KEY
from .helpers import start_generations, wait_in_flight
from .test_native import _generate_sglang, _generate_vllm, _running

pytestmark = pytest.mark.anyio


def fresh(tag: str) -> str:
    """A version name no server of the session has had."""
    return f"{tag}-{uuid.uuid4().hex[:8]}"


async def test_fleet_abort_stale_aborts_the_old_requests_on_every_server_and_keeps_the_new(stub_fleet):
    version = fresh("fleet")
    async with Fleet([s.url for s in stub_fleet], api_key=KEY) as fleet:
        old = [start_generations(s, 2, prefix=f"fleet-old{i}") for i, s in enumerate(fleet.servers)]
        for s in fleet.servers:
            await wait_in_flight(s, 2)
        bumped = await fleet.update_weight_version(version)
        assert bumped.ok
        new = [start_generations(s, 1, prefix=f"fleet-new{i}") for i, s in enumerate(fleet.servers)]
        for s in fleet.servers:
            await wait_in_flight(s, 3)
        loads = await fleet.loads()
        result = await fleet.abort_stale(admitted_before=version, wait=True, timeout_s=20)
        partials = [await asyncio.gather(*tasks) for tasks in old]
        assert not any(t.done() for tasks in new for t in tasks)
        after = await fleet.loads()
        await fleet.abort(wait=True, timeout_s=20)
        for tasks in new:
            await asyncio.gather(*tasks)
    assert result.ok and result.operation == "abort_stale"
    for r in result.results:
        assert (r.value.aborted, r.value.in_flight, r.value.idle, r.value.timed_out) == (2, 1, False, False)
    for r in loads.results:
        assert r.value.in_flight_by_version[version] == 1 and sum(r.value.in_flight_by_version.values()) == 3
    assert all(r.value.in_flight_by_version == {version: 1} for r in after.results)
    assert all(p.cancelled and p.cancel_reason == "stale" for ps in partials for p in ps)


async def test_server_abort_stale_by_max_staleness_and_a_generation_that_fences_itself(stub_fleet):
    async with ServerClient(stub_fleet[0].url, api_key=KEY) as server:
        limited = asyncio.create_task(server.partial_generate([1, 2, 3], {"max_new_tokens": 100_000}, "self-fenced", max_staleness=1))
        [old] = start_generations(server, 1, prefix="by-k")
        await wait_in_flight(server, 2, tasks=[limited, old])
        await server.update_weight_version(fresh("k"))
        fenced = await limited
        outcome = await server.abort_stale(max_staleness=1, wait=True, timeout_s=20)
        result = await old
        with pytest.raises(ServerError) as unknown:
            await server.abort_stale(admitted_before=fresh("never"))
    assert fenced.cancelled and fenced.cancel_reason == "stale"
    assert outcome.aborted == 1 and outcome.idle and result.cancel_reason == "stale"
    assert unknown.value.kind == "http" and unknown.value.status == 400 and "never-" in unknown.value.message


async def test_a_selector_needs_exactly_one_of_its_two_forms(stub_fleet):
    async with Fleet([stub_fleet[0].url], api_key=KEY) as fleet:
        for kwargs in ({}, {"admitted_before": "v1", "max_staleness": 1}, {"max_staleness": 0}, {"admitted_before": ""}):
            with pytest.raises(ValueError):
                await fleet.abort_stale(**kwargs)


async def test_abort_stale_with_wait_keeps_to_the_fleets_one_deadline(slow_release_stub, stub_fleet):
    async with Fleet([slow_release_stub.url, stub_fleet[1].url], api_key=KEY) as fleet:
        slow = fleet.servers[0]
        gens = start_generations(slow, 2, prefix="slow-stale")
        await wait_in_flight(slow, 2)
        await slow.update_weight_version(fresh("slow"))
        started = time.monotonic()
        result = await fleet.abort_stale(max_staleness=1, wait=True, timeout_s=1.5)
        elapsed = time.monotonic() - started
        for task in gens:
            task.cancel()
        await asyncio.gather(*gens, return_exceptions=True)
    assert elapsed < 1.5 + 1.0, f"took {elapsed:.2f} s"
    held, other = result.results
    assert held.kind == "timeout" and held.value.aborted == 2 and held.value.timed_out
    assert other.ok and other.value.aborted == 0


async def test_servers_without_the_plugin_refuse_the_selector_and_abort_nothing(fake_sglang, fake_vllm, stub_fleet):
    async with Fleet([fake_sglang.url, fake_vllm.url, stub_fleet[2].url], api_key=None) as fleet, httpx.AsyncClient() as http:
        sglang, vllm = fleet.servers[0], fleet.servers[1]
        gens = _generate_sglang(http, fake_sglang.url, 1, "keep") + _generate_vllm(http, fake_vllm.url, 1, "keep")
        await _running(sglang, 1)
        await _running(vllm, 1)
        calls_before = (fake_sglang.calls(), fake_vllm.calls())
        result = await fleet.abort_stale(max_staleness=1, wait=True, timeout_s=10)
        calls_after = (fake_sglang.calls(), fake_vllm.calls())
        still = [(await s.loads()).running for s in (sglang, vllm)]
        assert not any(g.done() for g in gens)
        await fleet.abort_until_idle(20)
        await asyncio.gather(*gens)
    by_engine = dict(zip(("SGLang", "vLLM"), result.results))
    for engine, r in by_engine.items():
        assert not r.ok and r.kind == "unsupported"
        assert "needs the engine-plugins plugin" in r.error and engine in r.error and "nothing was aborted" in r.error
    assert result.results[2].kind == "unauthorized", "the stub wants its key: its own result, the others kept"
    assert calls_after == calls_before, "nothing was sent"
    assert still == [1, 1]


def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_cli_abort_by_age(stub_fleet, capsys):
    url = stub_fleet[1].url
    version = fresh("cli")
    assert main(["version", url, version, "--api-key", KEY, "--json"]) == exit_codes.OK
    capsys.readouterr()
    code, data = run_json(capsys, "abort", url, "--admitted-before", version, "--wait", "--api-key", KEY)
    assert code == exit_codes.OK and data["operation"] == "abort_stale"
    assert data["servers"][0]["result"]["aborted"] == 0
    code, data = run_json(capsys, "abort", url, "--max-staleness", "2", "--api-key", KEY)
    assert code == exit_codes.OK and data["servers"][0]["result"]["idle"] is True
    code, data = run_json(capsys, "abort", url, "--admitted-before", fresh("never"), "--api-key", KEY)
    assert code == exit_codes.FAILED and data["servers"][0]["kind"] == "http" and "never-" in data["servers"][0]["error"]
    assert main(["abort", url, "--max-staleness", "1", "--api-key", KEY]) == exit_codes.OK
    assert "abort admitted 1 or more bumps ago" in capsys.readouterr().out
    code, data = run_json(capsys, "loads", url, "--api-key", KEY)
    assert data["servers"][0]["result"]["in_flight_by_version"] == {}


def test_cli_abort_by_age_on_a_server_without_the_plugin_fails_clearly(fake_sglang, capsys):
    code, data = run_json(capsys, "abort", fake_sglang.url, "--admitted-before", "v7")
    assert code == exit_codes.FAILED
    assert data["servers"][0]["kind"] == "unsupported" and "admitted before v7" in data["servers"][0]["error"]
    assert fake_sglang.calls() == []


@pytest.mark.parametrize("argv", [
    ["abort", "http://x", "--max-staleness", "0"],
    ["abort", "http://x", "--max-staleness", "two"],
    ["abort", "http://x", "--max-staleness", "1", "--admitted-before", "v1"],
    ["abort", "http://x", "--ids", "a", "--max-staleness", "1"],
])
def test_cli_bad_selectors_are_usage_errors(argv, capsys):
    assert main(argv) == exit_codes.USAGE
    assert "usage:" in capsys.readouterr().err
