"""The gateway tier on stub engines (fast): a real smg 1.13.0 with ``--enable-rl`` in front of
two stubs; the client's Fleet and the CLI through it; and smg's parser against the schema the
tests mirror (tests/gateway/smg_loads.py), answer shape by answer shape."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from client.servers import serve_app, stub_process
from contract.api import Api
from engine_plugins.cli import main as cli_main
from engine_plugins.client import Fleet
from targets import API_KEY, stub_server

from .smg_loads import WorkerLoadResponse
from .smg_server import smg_gateway
from .tier import Smg, check_discovery, check_fanouts, check_loads_accepted

pytestmark = pytest.mark.anyio


async def test_smg_discovers_the_stubs(stub_gateway, stub_pair):
    async with Smg(stub_gateway) as smg:
        # The stub names no engine smg knows: smg registers it as a generic OpenAI server.
        await check_discovery(smg, [("generic", t) for t in stub_pair])


async def test_smg_parses_the_stubs_loads(stub_gateway, stub_pair):
    async with Smg(stub_gateway) as smg:
        await check_loads_accepted(smg, stub_pair)


async def test_each_operation_fans_out_to_every_stub(stub_gateway, stub_pair):
    async with Smg(stub_gateway) as smg:
        await check_fanouts(smg, stub_pair)


async def test_fleet_through_the_gateway_drains_bumps_and_pauses_every_worker(stub_gateway, stub_pair):
    apis = [Api(t) for t in stub_pair]
    gens = [asyncio.create_task(api.generate(t.long_tokens, request_id=f"fleet-{i}-{j}"))
            for i, (api, t) in enumerate(zip(apis, stub_pair)) for j in range(3)]
    try:
        for api in apis:
            await api.wait_in_flight(3)
        async with Fleet(gateway=stub_gateway.url, api_key=API_KEY) as fleet:
            drained = await fleet.abort_until_idle(timeout_s=30)
            bumped = await fleet.update_weight_version("fleet-v2")
            paused = await fleet.pause("keep")
            states = [await api.ok("GET", "/is_paused") for api in apis]
            resumed = await fleet.resume()
            loads = await fleet.loads()
        partials = await asyncio.gather(*gens)
    finally:
        for api in apis:
            await api.ok("POST", "/resume")
            await api.__aexit__()
    urls = sorted(t.url for t in stub_pair)
    for result in (drained, bumped, paused, resumed, loads):
        assert result.ok and [r.url for r in result.results] == urls, result.to_dict()
    assert all(r.value.idle and r.value.aborted == 3 and r.value.in_flight == 0 for r in drained.results), drained.to_dict()
    assert all(p["cancelled"] for p in partials)
    assert all(r.value.new_version == "fleet-v2" for r in bumped.results)
    assert states == [{"is_paused": True, "mode": "keep"}] * 2
    assert all(r.value.is_paused is False for r in resumed.results)
    assert all(r.value.weight_version == "fleet-v2" and r.value.idle for r in loads.results)
    assert all(r.api.startswith("engine-plugins contract on stub via smg") for r in loads.results)


async def test_fleet_selector_narrows_the_workers(stub_gateway, stub_pair):
    one = stub_pair[0].url
    async with Fleet(gateway=stub_gateway.url, api_key=API_KEY, selector=f"url={one}") as fleet:
        result = await fleet.is_paused()
    assert [r.url for r in result.results] == [one] and result.ok


async def test_fleet_reports_the_gateway_when_smg_refuses(stub_gateway):
    async with Fleet(gateway=stub_gateway.url, api_key="not-the-key") as fleet:
        result = await fleet.loads()
    (only,) = result.results
    assert not result.ok and only.url == stub_gateway.url and only.kind == "unauthorized", result.to_dict()
    async with Fleet(gateway=stub_gateway.url, api_key=API_KEY, selector="engine=trtllm") as fleet:
        result = await fleet.abort_until_idle(timeout_s=5)
    (only,) = result.results
    assert only.kind == "http" and "no_workers_match" in only.error, result.to_dict()


async def test_a_worker_gone_is_its_own_failure_and_the_others_answer(tmp_path):
    with contextlib.ExitStack() as stack:
        stubs = [stack.enter_context(stub_process(tmp_path, api_key=API_KEY)) for _ in range(2)]
        gateway = stack.enter_context(smg_gateway(tmp_path, [s.url for s in stubs], API_KEY))
        kept, gone = stubs
        gone.kill()  # smg still lists it: its calls fail
        async with Fleet(gateway=gateway.url, api_key=API_KEY) as fleet:
            result = await fleet.update_weight_version("after-loss")
    by_url = {r.url: r for r in result.results}
    assert by_url[kept.url].ok and by_url[kept.url].value.new_version == "after-loss", result.to_dict()
    assert not by_url[gone.url].ok and by_url[gone.url].kind == "unreachable", result.to_dict()
    assert not result.ok and [r.url for r in result.failed] == [gone.url]


def test_cli_gateway_option(stub_gateway, stub_pair, capsys):
    code = cli_main(["version", "--gateway", stub_gateway.url, "--api-key", API_KEY, "--json", "cli-v7"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"], out
    assert sorted(s["url"] for s in out["servers"]) == sorted(t.url for t in stub_pair)
    assert all(s["result"]["new_version"] == "cli-v7" for s in out["servers"])
    assert cli_main(["loads", stub_pair[0].url, "--gateway", stub_gateway.url]) == 2
    assert cli_main(["swap-begin", "--gateway", stub_gateway.url, "--api-key", API_KEY, "--json", "--version", "cli-v8"]) == 0
    began = json.loads(capsys.readouterr().out)
    assert cli_main(["swap-commit", "--gateway", stub_gateway.url, "--api-key", API_KEY, "--json", "--version", "cli-v8"]) == 0
    committed = json.loads(capsys.readouterr().out)
    assert [s["result"]["state"] for s in began["servers"]] == ["open", "open"], began
    assert [s["result"]["state"] for s in committed["servers"]] == ["committed", "committed"], committed
    assert cli_main(["loads", stub_pair[0].url, "--selector", "engine=sglang"]) == 2


# --- smg's parser, shape by shape: the mirror refuses exactly what smg 1.13.0 refuses ----------

RANK = {"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 2, "num_total_reqs": 5}
SHAPES = {
    "the contract's": {"timestamp": "2026-12-01T00:00:00+00:00", "version": "0.5.23", "loads": [RANK],
                       "aggregate": {"total_running_reqs": 3, "total_waiting_reqs": 2, "total_reqs": 5},
                       "in_flight": 5, "paused": False, "weight_version": "v", "engine": "sglang", "in_flight_by_version": {"v": 5}},
    "SGLang's sections": {"loads": [{**RANK, "timestamp": 1.5, "decode_moments": None,
                                      "memory": {"weight_gb": 0.1, "kv_cache_gb": 0.2, "graph_gb": 0.0, "token_capacity": 5},
                                      "queues": {"waiting": 2, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0},
                                      "disaggregation": {"mode": "null", "kv_transfer_speed_gb_s": 0.0}}]},
    "an int where a float goes": {"loads": [{**RANK, "token_usage": 1}]},
    "the largest 32-bit int": {"loads": [{**RANK, "num_used_tokens": 2**31 - 1}]},
    "a null float": {"loads": [{**RANK, "token_usage": None}]},
    "an int past 32 bits": {"loads": [{**RANK, "num_used_tokens": 2**31}]},
    "a float where an int goes": {"loads": [{**RANK, "num_running_reqs": 3.0}]},
    "a number as timestamp": {"timestamp": 1.5, "loads": [RANK]},
    "a null version": {"version": None, "loads": [RANK]},
    "a null in the aggregate": {"loads": [RANK], "aggregate": {"total_reqs": 5, "avg_token_usage": None}},
    "no ranks": {"loads": []},
}


def _loads_worker(body: dict, hits: list) -> FastAPI:
    """A worker smg registers (an SGLang /v1/models) whose /v1/loads answers *body*; *hits*
    gets an entry for each /v1/loads call."""
    app = FastAPI()
    app.get("/health")(lambda: {})
    app.get("/v1/models")(lambda: {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "sglang"}]})

    @app.get("/v1/loads")
    def loads():
        hits.append(1)
        return JSONResponse(body)

    return app


def _mirror_accepts(body: dict) -> bool:
    try:
        WorkerLoadResponse.model_validate(body)
        return True
    except ValidationError:
        return False


async def test_smg_accepts_exactly_the_shapes_its_schema_mirror_accepts(tmp_path):
    hits = {name: [] for name in SHAPES}
    with contextlib.ExitStack() as stack:
        urls = {name: stack.enter_context(serve_app(_loads_worker(body, hits[name]))) for name, body in SHAPES.items()}
        gateway = stack.enter_context(smg_gateway(tmp_path, list(urls.values()), API_KEY))
        async with Smg(gateway) as smg:
            # smg probes every worker of a group in one monitor round and publishes the round
            # once all are read: two more probes of one worker after every worker was probed
            # means every worker's first answer has been read. A refused one is never asked again.
            await wait_until("smg probed every worker", lambda: all(hits.values()))
            seen = len(hits["the contract's"])
            await wait_until("two more smg load rounds", lambda: len(hits["the contract's"]) >= seen + 2)
            parsed = await smg.parsed_loads()
    verdicts = {name: (url in parsed, _mirror_accepts(SHAPES[name])) for name, url in urls.items()}
    assert all(smg_ok == mirror_ok for smg_ok, mirror_ok in verdicts.values()), verdicts
    assert verdicts["the contract's"] == (True, True) and verdicts["a null float"] == (False, False)
    assert parsed[urls["the contract's"]]["num_total_reqs"] == 5
    # A refused answer is remembered as "no loads endpoint": never asked again. An empty list
    # ("no ranks yet") is asked again on every round.
    refused = [name for name in SHAPES if not _mirror_accepts(SHAPES[name])]
    assert all(len(hits[name]) == 1 for name in refused if name != "no ranks"), hits
    assert len(hits["no ranks"]) > 1, hits


async def wait_until(what: str, check, deadline_s: float = 60.0) -> None:
    """Poll *check()* until true; a setup failure naming *what* if it never is."""
    end = asyncio.get_running_loop().time() + deadline_s
    while not check():
        assert asyncio.get_running_loop().time() < end, f"setup: {what} did not happen within {deadline_s} s"
        await asyncio.sleep(0.05)


async def test_fleet_weight_swap_through_the_gateway_holds_every_worker_until_its_commit(stub_gateway, stub_pair):
    apis = [Api(t) for t in stub_pair]
    try:
        async with Fleet(gateway=stub_gateway.url, api_key=API_KEY) as fleet:
            async with fleet.weight_swap("smg-swap-v3", clear_cache=False) as swap:
                during = [await api.ok("GET", "/is_paused") for api in apis]
            loads = await fleet.loads()
    finally:
        for api in apis:
            await api.ok("POST", "/resume")
            await api.__aexit__()
    urls = sorted(t.url for t in stub_pair)
    assert swap.began.ok and [r.url for r in swap.began.results] == urls, swap.began.to_dict()
    assert swap.committed.ok and [r.url for r in swap.committed.results] == urls, swap.committed.to_dict()
    assert all(r.value.state == "committed" and r.value.version == "smg-swap-v3" for r in swap.committed.results)
    assert all(state["is_paused"] and state["weight_swap"]["version"] == "smg-swap-v3" for state in during)
    assert all(r.value.weight_version == "smg-swap-v3" and not r.value.paused for r in loads.results), loads.to_dict()


async def test_a_worker_whose_begin_failed_through_the_gateway_is_not_committed(stub_gateway, stub_pair):
    busy, free = [Api(t) for t in stub_pair]
    try:
        held = await busy.ok("POST", "/weight_swap/begin", {"version": "held-elsewhere", "mode": "keep"})
        async with Fleet(gateway=stub_gateway.url, api_key=API_KEY) as fleet:
            async with fleet.weight_swap("smg-swap-v4") as swap:
                pass
        still = await busy.ok("GET", "/is_paused")
        await busy.ok("POST", "/weight_swap/commit", {"swap_id": held["swap_id"]})
    finally:
        for api in (busy, free):
            await api.ok("POST", "/resume")
            await api.__aexit__()
    began = {r.url: r for r in swap.began.results}
    committed = {r.url: r for r in swap.committed.results}
    assert not began[busy.target.url].ok and "409" in began[busy.target.url].error, swap.began.to_dict()
    assert began[free.target.url].ok and committed[free.target.url].ok, swap.committed.to_dict()
    assert not committed[busy.target.url].ok and "did not begin" in committed[busy.target.url].error
    assert still["weight_swap"]["swap_id"] == held["swap_id"], "the other trainer's swap is left as it was"
