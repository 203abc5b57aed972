"""The client against real stub servers on loopback, alone and as a fleet with servers that fail
(500), are down, hang, hang up, or disappear mid-call: one result per server, one deadline."""

import asyncio
import contextlib
import time

import httpx
import pytest

from engine_plugins.client import Fleet, ServerClient
from engine_plugins.client.errors import ServerError
from engine_plugins.client.http1 import Http1Client
from engine_plugins.client.transport import Transport

from .conftest import KEY
from .servers import raw_socket_server
from .helpers import start_generations, wait_in_flight, wait_until

pytestmark = pytest.mark.anyio


async def test_detects_the_contract_and_reads_loads(stub_fleet):
    async with ServerClient(stub_fleet[0].url, api_key=KEY) as server:
        found = await server.detection()
        load = await server.loads()
    assert found.flavor.value == "contract" and found.engine == "stub"
    assert "contract on stub" in found.detail
    assert load.source == "contract" and load.engine == "stub" and load.idle


async def test_fleet_abort_until_idle_drains_every_server_and_salvages_partials(stub_fleet):
    urls = [s.url for s in stub_fleet]
    events = []
    async with Fleet(urls, api_key=KEY) as fleet:
        tasks = {s.url: start_generations(s, 4, prefix=f"drain{i}") for i, s in enumerate(fleet.servers)}
        for s in fleet.servers:
            await wait_in_flight(s, 4)
        result = await fleet.abort_until_idle(timeout_s=30, progress=lambda url, phase, n: events.append((url, phase, n)))
        partials = {url: await asyncio.gather(*ts) for url, ts in tasks.items()}
        loads = await fleet.loads()
    assert result.ok and [r.url for r in result.results] == urls
    for r in result.results:
        assert r.value.idle is True and r.value.aborted == 4 and r.value.in_flight == 0 and not r.value.timed_out
        assert r.api == "engine-plugins contract on stub"
    for url in urls:
        assert (url, "idle", 0) in events
        assert all(p.cancelled and len(p.output_ids) == len(p.output_logprobs) for p in partials[url])
    assert all(r.value.idle for r in loads.results)


async def test_a_failing_a_missing_and_an_unreachable_server_do_not_lose_the_others(
    stub_fleet, failing_url, unreachable_url
):
    no_such_route = stub_fleet[1].url + "/not-a-prefix"
    urls = [stub_fleet[0].url, failing_url, unreachable_url, no_such_route, stub_fleet[2].url]
    async with Fleet(urls, api_key=KEY) as fleet:
        for op in (fleet.loads(), fleet.abort(), fleet.abort_until_idle(10), fleet.update_weight_version("v-f"),
                   fleet.pause("keep"), fleet.resume()):
            result = await op
            by_url = {r.url: r for r in result.results}
            assert [r.url for r in result.results] == urls
            assert by_url[stub_fleet[0].url].ok and by_url[stub_fleet[2].url].ok, result.to_dict()
            assert by_url[unreachable_url].kind == "unreachable" and "cannot connect" in by_url[unreachable_url].error
            assert by_url[no_such_route].kind == "unsupported" and "not a known engine" in by_url[no_such_route].error
            assert not by_url[failing_url].ok
            assert len(result.failed) == 3 and not result.ok


async def test_500_is_reported_with_the_servers_message(failing_url):
    async with Fleet([failing_url]) as fleet:
        # Detection cannot tell what a server that fails everything is; a contract server failing
        # one route is shown on the route itself.
        result = await fleet.loads()
    assert result.results[0].kind == "unsupported"


async def test_a_5xx_on_one_route_is_a_per_server_http_failure(stub_fleet):
    async with ServerClient(stub_fleet[0].url, api_key=KEY) as server:
        await server.detection()
        with pytest.raises(ServerError) as err:
            await server.transport.call("POST", "/partial_generate", {"input_ids": []})
    assert err.value.kind == "http" and err.value.status == 400 and "input_ids" in err.value.message


async def test_wrong_key_is_unauthorized_with_a_hint(stub_fleet):
    async with Fleet([stub_fleet[0].url], api_key="wrong") as fleet:
        result = await fleet.abort()
    r = result.results[0]
    assert r.kind == "unauthorized" and "--api-key" in r.error


async def test_a_hanging_server_cannot_stretch_the_overall_deadline(stub_fleet, hanging_url):
    async with Fleet([stub_fleet[0].url, hanging_url, stub_fleet[1].url], api_key=KEY) as fleet:
        started = time.monotonic()
        result = await fleet.abort_until_idle(timeout_s=2.0)
        elapsed = time.monotonic() - started
    assert elapsed < 2.0 + 1.0, f"took {elapsed:.2f} s"
    ok = [r for r in result.results if r.ok]
    assert len(ok) == 2 and all(r.value.idle for r in ok)
    hung = result.results[1]
    assert hung.kind == "timeout" and not hung.ok and result.timed_out == [hung]


async def test_a_server_that_hangs_up_is_reported_as_disconnected(hang_up_url, stub_fleet):
    async with Fleet([hang_up_url, stub_fleet[0].url], api_key=KEY) as fleet:
        result = await fleet.loads()
    assert result.results[0].kind == "disconnected" and "lost" in result.results[0].error
    assert result.results[1].ok


@pytest.mark.parametrize("client", ["own", "httpx"])
async def test_a_control_call_on_a_connection_the_server_just_closed_is_sent_again(client):
    with raw_socket_server("answer_once") as url:
        # The client's own keep-alive expiry (2 s) is long past on a busy machine between two
        # calls, and an expired connection is never reused: this test needs it reused.
        async with contextlib.AsyncExitStack() as stack:
            if client == "own":
                http = Http1Client(keepalive_expiry_s=600)
                stack.push_async_callback(http.aclose)
            else:
                http = await stack.enter_async_context(httpx.AsyncClient(limits=httpx.Limits(keepalive_expiry=600)))
            transport = Transport(url, http)
            assert await transport.call("GET", "/v1/loads", timeout_s=10) == {"ok": True}
            # The kept-alive connection is closed as this call goes out on it; a new one answers.
            assert await transport.call("POST", "/abort_requests", {}, timeout_s=10) == {"ok": True}
            # A generation is never sent twice: the server may have started it.
            with pytest.raises(ServerError) as lost:
                await transport.call("POST", "/partial_generate", {"input_ids": [1]}, timeout_s=10, idempotent=False)
    assert lost.value.kind == "disconnected" and "lost" in lost.value.message


async def test_a_server_that_dies_mid_wait_is_a_failed_result_not_an_exception(slow_release_stub, stub_fleet):
    async with Fleet([slow_release_stub.url, stub_fleet[0].url], api_key=KEY) as fleet:
        dying = fleet.servers[0]
        gens = start_generations(dying, 2, prefix="dies")
        await wait_in_flight(dying, 2)
        drain = asyncio.create_task(fleet.abort_until_idle(timeout_s=60))
        # The stub holds the aborted requests for 30 s; kill it while the client waits on it.
        await wait_until("the abort to be waiting", lambda: _aborted(dying))
        slow_release_stub.kill()
        result = await drain
        await asyncio.gather(*gens, return_exceptions=True)
    assert result.results[0].kind == "disconnected", result.to_dict()
    assert result.results[1].ok and result.results[1].value.idle


async def _aborted(server) -> bool:
    # The drain's abort has landed once a second abort finds nothing new to abort, while the
    # stub still holds both requests (they release only after 30 s).
    outcome = await server.abort(wait=False)
    return outcome.aborted == 0 and outcome.in_flight == 2


async def test_abort_until_idle_times_out_with_the_last_count_when_requests_never_release(slow_release_stub):
    async with ServerClient(slow_release_stub.url, api_key=KEY) as server:
        tasks = start_generations(server, 2, prefix="slow")
        await wait_in_flight(server, 2)
        started = time.monotonic()
        outcome = await server.abort_until_idle(timeout_s=1.5)
        elapsed = time.monotonic() - started
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert outcome.timed_out and outcome.idle is False and outcome.in_flight == 2 and outcome.aborted == 2
    assert elapsed < 1.5 + 0.5


async def test_abort_by_ids_with_wait_touches_only_those(stub_fleet):
    async with ServerClient(stub_fleet[2].url, api_key=KEY) as server:
        tasks = start_generations(server, 4, prefix="ids")
        await wait_in_flight(server, 4)
        outcome = await server.abort(["ids-1", "ids-3", "unknown-id"], wait=True, timeout_s=20)
        assert outcome.aborted == 2 and outcome.in_flight == 2 and not outcome.timed_out
        # The server has released the two; their answers are on their way (on a busy machine
        # they may reach this client after the abort's own answer).
        await asyncio.wait_for(asyncio.gather(tasks[1], tasks[3]), 20)
        assert [t.done() for t in tasks] == [False, True, False, True]
        rest = await server.abort_until_idle(20)
        await asyncio.gather(*tasks)
    assert rest.idle and rest.aborted == 2


async def test_version_bump_keeps_in_flight_work_and_pause_keep_freezes_it(stub_fleet):
    async with ServerClient(stub_fleet[1].url, api_key=KEY) as server:
        [task] = start_generations(server, 1, max_new_tokens=300, prefix="keep")
        await wait_in_flight(server, 1)
        before = (await server.loads()).weight_version
        bumped = await server.update_weight_version("v-keep")
        assert bumped.previous_version == before and bumped.aborted == 0 and not task.done()
        paused = await server.pause("keep")
        assert paused.is_paused and paused.mode == "keep"
        assert (await server.is_paused()).mode == "keep"
        assert not task.done()
        resumed = await server.resume()
        result = await task
    assert resumed.is_paused is False
    assert result.finish_reason == "length" and len(result.output_ids) == 300
    assert result.weight_versions[-1].version == "v-keep"


async def test_version_bump_with_abort_all_aborts_in_flight(stub_fleet):
    async with ServerClient(stub_fleet[1].url, api_key=KEY) as server:
        tasks = start_generations(server, 3, prefix="vabort")
        await wait_in_flight(server, 3)
        bumped = await server.update_weight_version("v-abort", abort_all_requests=True)
        results = await asyncio.gather(*tasks)
    assert bumped.aborted == 3 and all(r.cancelled for r in results)
