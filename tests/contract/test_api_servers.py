"""Several API server processes behind one port: every rule holds whichever process gets a call.

Each answer names the process that gave it (``engine-plugins-api-server: INDEX/COUNT``), so
these tests see where every request and every control call landed, and check that a control
call covers requests held by other processes than its own.

The fault tests make one process fail its share of a control call, while the call is sent to
another over a kept-alive connection: on the fake, ``POST /fake/peer_fault`` (its op raises, or
its peer calls wait unread as at a stopped process); on a real vLLM, SIGSTOP to that API process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any, AsyncIterator, Optional
from urllib.parse import urlparse

import httpx
import pytest

from contract.api import Api, assert_partial
from engine_plugins.fanout.peers import socket_dir
from engine_plugins.contract.schema import AbortResult, LoadsResult, PartialGenerateResult
from engine_plugins.fanout.spread import PAUSE_OWNER

# vllm-0.26-stub-api3: where vLLM keeps no weight version, the plugin's, kept in the engine core,
# is one across the processes too.
pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-stub-api3", "vllm-0.26-stub-api3", "vllm-api2", "vllm-dp2")]

HEADER = "engine-plugins-api-server"
N = 12


def process_of(response: httpx.Response) -> int:
    """The index of the API process that answered."""
    value = response.headers.get(HEADER)
    assert value is not None, f"no {HEADER} header on a server with several API processes"
    return int(value.split("/")[0])


async def fresh_call(api: Api, method: str, path: str, body: Any = None) -> httpx.Response:
    """One call on a new connection, so that it may reach any process."""
    async with httpx.AsyncClient(base_url=api.target.url, headers=dict(api.http.headers), timeout=300.0) as http:
        response = await http.request(method, path, json=body)
    assert response.status_code == 200, f"{method} {path} -> {response.status_code} {response.text}"
    return response


def _generation(api: Api, request_id: str, extra: dict) -> dict:
    """The body of one long generation *request_id*, with the body fields *extra*."""
    return {"input_ids": [1, 15, 27, 33, 41], "request_id": request_id,
            "sampling_params": {"max_new_tokens": api.target.long_tokens, "ignore_eos": True}, **extra}


def start(api: Api, n: int, prefix: str, **extra: Any) -> list[asyncio.Task]:
    """*n* long generations, each on a connection of its own (so they spread over the processes),
    with the body fields *extra*."""

    async def one(i: int) -> httpx.Response:
        return await fresh_call(api, "POST", "/partial_generate", _generation(api, f"{prefix}-{i}", extra))

    return [asyncio.create_task(one(i)) for i in range(n)]


def start_on(api: Api, index: int, request_id: str, **extra: Any) -> asyncio.Task:
    """One long generation on API process *index* (a connection pinned there)."""

    async def one() -> httpx.Response:
        async with pinned(api, index) as (http, _, _):
            return await http.post("/partial_generate", json=_generation(api, request_id, extra))

    return asyncio.create_task(one())


async def test_the_answers_name_the_process_and_loads_are_exact_from_every_process(target):
    async with Api(target) as api:
        tasks = start(api, N, "loads")
        await api.wait_in_flight(N)
        seen = set()
        for _ in range(20):
            response = await fresh_call(api, "GET", "/v1/loads")
            seen.add(process_of(response))
            answer = LoadsResult.model_validate(response.json())
            assert answer.in_flight == N, f"process {process_of(response)} counted {answer.in_flight} of {N}"
            assert sum(r.num_total_reqs for r in answer.loads) == N
        await api.ok("POST", "/abort_requests", {"wait": True})
        answers = await asyncio.gather(*tasks)
    held = {process_of(r) for r in answers}
    assert len(held) >= 2, f"setup: all {N} requests reached process {held}"
    assert len(seen) >= 2, f"setup: 20 connections all reached process {seen}"


async def test_abort_all_from_one_process_covers_the_requests_of_every_process(target):
    async with Api(target) as api:
        tasks = start(api, N, "all")
        await api.wait_in_flight(N)
        response = await fresh_call(api, "POST", "/abort_requests", {"wait": True})
        answers = await asyncio.gather(*tasks)
    result = AbortResult.model_validate(response.json())
    assert (result.aborted, result.idle, result.timed_out) == (N, True, False)
    elsewhere = [r for r in answers if process_of(r) != process_of(response)]
    assert elsewhere, f"setup: every request ran on the aborting process {process_of(response)}"
    for r in answers:
        assert r.json()["cancelled"] and r.json()["cancel_reason"] == "abort"
        assert_partial(r.json(), target.long_tokens)


async def test_abort_by_id_finds_the_request_on_whichever_process_holds_it(target):
    async with Api(target) as api:
        tasks = start(api, N, "id")
        await api.wait_in_flight(N)
        chosen = [f"id-{i}" for i in range(0, N, 2)]
        response = await fresh_call(api, "POST", "/abort_requests", {"request_ids": chosen, "wait": True})
        result = AbortResult.model_validate(response.json())
        assert (result.aborted, result.in_flight, result.timed_out) == (len(chosen), N - len(chosen), False)
        await api.ok("POST", "/abort_requests", {"wait": True})
        answers = await asyncio.gather(*tasks)
    by_id = {r.json()["request_id"]: r for r in answers}
    assert {process_of(by_id[i]) for i in chosen} - {process_of(response)}, "setup: the chosen ids all ran where the abort landed"


async def test_pause_on_one_process_cuts_and_holds_partial_generations_on_the_others(target):
    async with Api(target) as api:
        tasks = start(api, N, "pause")
        await api.wait_in_flight(N)
        pause = await fresh_call(api, "POST", "/pause", {"mode": "abort"})
        answers = await asyncio.gather(*tasks)
        try:
            for r in answers:
                assert r.json()["cancelled"] and r.json()["cancel_reason"] == "pause"
            assert {process_of(r) for r in answers} - {process_of(pause)}, "setup: every request ran where the pause landed"
            # Every process refuses new work until the resume, whichever process paused.
            refused = set()
            for _ in range(12):
                r = await fresh_call(api, "POST", "/partial_generate", {"input_ids": [1, 2, 3]})
                assert PartialGenerateResult.model_validate(r.json()).cancel_reason == "pause"
                refused.add(process_of(r))
                status = await fresh_call(api, "GET", "/is_paused")
                assert status.json()["is_paused"], f"process {process_of(status)} does not know it is paused"
            assert len(refused) >= 2, f"setup: 12 connections all reached process {refused}"
        finally:
            await fresh_call(api, "POST", "/resume")
        for _ in range(6):
            r = await fresh_call(api, "POST", "/partial_generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}})
            assert r.json()["finish_reason"] == "length", f"process {process_of(r)} still paused"


async def test_a_bump_on_one_process_is_seen_by_the_requests_of_every_process(target):
    await _bump_seen_everywhere(target, "/update_weight_version", "new_version")


# A real vLLM on the CPU has no weight-transfer engine over several API processes here
# (tests/swap/test_vllm_transfer.py runs the route on one): the fake's route, as vLLM's.
@pytest.mark.targets("vllm-stub-api3")
async def test_the_version_vllms_finish_weight_update_sets_is_one_bump_on_every_process(target):
    await _bump_seen_everywhere(target, "/finish_weight_update", "weight_version")


async def _bump_seen_everywhere(target, path: str, field: str) -> None:
    """A bump sent to one process by *path* (its version in *field*) is seen by every process's
    loads and by the requests each holds."""
    async with Api(target) as api:
        before = (await api.loads())["weight_version"]
        tasks = start(api, N, "bump")
        await api.wait_in_flight(N, running=True)
        bump = await fresh_call(api, "POST", path, {field: before + "-next"})
        assert bump.json().get("aborted", 0) == 0
        for _ in range(6):
            loads = await fresh_call(api, "GET", "/v1/loads")
            assert loads.json()["weight_version"] == before + "-next", f"process {process_of(loads)} kept the old version"
        # A short generation that runs to its end steps the running batch with it: every
        # request then has tokens under the new version.
        await api.generate(2)
        await api.ok("POST", "/abort_requests", {"wait": True})
        answers = await asyncio.gather(*tasks)
    assert {process_of(r) for r in answers} - {process_of(bump)}, "setup: every request ran where the bump landed"
    for r in answers:
        spans = r.json()["weight_versions"]
        assert_partial(r.json(), target.long_tokens)
        assert spans[-1]["version"] == before + "-next", f"request on process {process_of(r)}: {spans}"


# The fake counts the calls its engine core gets (a real vLLM has no such count).
@pytest.mark.targets("vllm-stub-api3")
async def test_each_pause_resume_and_bump_reaches_the_shared_engine_core_once(target):
    """Whichever process a call reaches, the engine core (shared by every process) is paused,
    resumed and given the new version once per call, and each process still does its share."""
    async with Api(target) as api:

        async def once(method: str, path: str, body: Any, utility: str) -> httpx.Response:
            before = (await fresh_call(api, "GET", "/fake/engine_calls")).json()
            response = await fresh_call(api, method, path, body)
            after = (await fresh_call(api, "GET", "/fake/engine_calls")).json()
            made = after.get(utility, 0) - before.get(utility, 0)
            assert made == 1, f"{path} {body} (sent to process {process_of(response)}): {made} {utility!r} calls"
            return response

        version = (await api.loads())["weight_version"]
        reached = set()
        for mode in ("abort", "keep", "wait"):
            tasks = start(api, N, f"once-{mode}") if mode != "wait" else []
            if tasks:
                await api.wait_in_flight(N)
            reached.add(process_of(await once("POST", "/pause", {"mode": mode}, "pause_scheduler")))
            for _ in range(6):
                status = await fresh_call(api, "GET", "/is_paused")
                assert status.json()["mode"] == mode, f"process {process_of(status)}: {status.json()}"
            reached.add(process_of(await once("POST", "/resume", None, "resume_scheduler")))
            version += "-once"
            reached.add(process_of(await once("POST", "/update_weight_version", {"new_version": version}, "set_weight_version")))
            await api.ok("POST", "/abort_requests", {"wait": True})
            answers = await asyncio.gather(*tasks)
            if mode == "abort":
                assert {process_of(r) for r in answers} - {PAUSE_OWNER}, "setup: every request ran on the pausing process"
                for r in answers:
                    assert r.json()["cancel_reason"] == "pause", f"request on process {process_of(r)}: {r.json()}"
        loads = [(await fresh_call(api, "GET", "/v1/loads")).json() for _ in range(6)]
    assert all(entry["weight_version"] == version for entry in loads), loads
    assert len(reached) >= 2, f"setup: every call reached process {reached}"


async def test_a_request_id_in_flight_on_another_process_is_a_conflict(target):
    async with Api(target) as api:
        [task] = start(api, 1, "dup")
        await api.wait_in_flight(1)
        refused_on = set()
        for _ in range(12):
            async with httpx.AsyncClient(base_url=target.url, headers=dict(api.http.headers), timeout=300.0) as http:
                r = await http.post("/partial_generate", json={"input_ids": [1, 2, 3], "request_id": "dup-0"})
            assert r.status_code == 409, f"process {process_of(r)}: {r.status_code} {r.text}"
            refused_on.add(process_of(r))
        await api.ok("POST", "/abort_requests", {"wait": True})
        first = await task
    assert refused_on - {process_of(first)}, f"setup: every duplicate reached the first one's process {refused_on}"
    assert first.json()["cancel_reason"] == "abort"


# --- faults: one process fails its share of a control call ------------------------------------


def api_processes(target) -> dict[int, tuple[int, Path]]:
    """Each API process of *target*: its pid and its peer socket, by index (from /proc: the
    processes that hold the server's listening TCP socket, and the Unix sockets they listen on
    in this user's socket directory)."""
    port = urlparse(target.url).port
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    listening.add(fields[9])
    under = str(socket_dir())
    unix = {}
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7].startswith(under) and fields[7].endswith(".sock"):
            unix[fields[6]] = Path(fields[7])
    found: dict[int, tuple[int, Path]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        inodes = {link[len("socket:["):-1] for link in links if link.startswith("socket:[")}
        if inodes & listening:
            for inode in inodes & unix.keys():
                found[int(unix[inode].name.split(".")[-2])] = (int(pid), unix[inode])
    return found


@contextlib.asynccontextmanager
async def pinned(api: Api, index: Optional[int] = None) -> AsyncIterator[tuple[httpx.AsyncClient, int, int]]:
    """A client on one kept-alive connection, the index of the process it reached, and the count;
    with *index*, a connection to that process (new connections until one lands there)."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    for _ in range(200):
        async with httpx.AsyncClient(base_url=api.target.url, headers=dict(api.http.headers), timeout=300.0, limits=limits) as http:
            here, count = map(int, (await http.get("/is_paused")).headers[HEADER].split("/"))
            if index is None or here == index:
                yield http, here, count
                return
    raise AssertionError(f"setup: no connection reached API process {index} in 200 tries")


@contextlib.asynccontextmanager
async def fault(api: Api, index: int, op: str, kind: str) -> AsyncIterator[None]:
    """Process *index* fails its share of *op*: ``raise`` (its op raises), or ``stop`` (it does
    not answer, as a stopped process; on a real vLLM it is one, by SIGSTOP)."""
    if api.target.real:
        assert kind == "stop", "a real API process's op cannot be made to raise (the fake's tests do)"
        pid = api_processes(api.target)[index][0]
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)
        return
    await fresh_call(api, "POST", "/fake/peer_fault", {"api_server": index, "op": op if kind == "raise" else None, "fault": kind})
    try:
        yield
    finally:
        await fresh_call(api, "POST", "/fake/peer_fault", {"api_server": index, "fault": None})


async def read_late_call(target, op: str) -> None:
    """Wait until the stopped process, running again, has read the call *op* it got while stopped."""
    end = time.monotonic() + 60
    while f"did not run the peer call {op!r}" not in target.log_tail():
        assert time.monotonic() < end, f"the stopped process never read its call:\n{target.log_tail()[-3000:]}"
        await asyncio.sleep(0.2)


# A real API process's op cannot be made to raise: the "raise" cases run on the fake only.
RAISE_TARGETS = ("vllm-stub-api3", "vllm-0.26-stub-api3")


@pytest.mark.targets(*RAISE_TARGETS)
async def test_a_pause_one_process_fails_by_raising_is_undone_everywhere_and_the_503_names_it(target):
    await _pause_one_process_fails(target, "raise")


async def test_a_pause_one_process_fails_by_stopping_is_undone_everywhere_and_the_503_names_it(target):
    await _pause_one_process_fails(target, "stop")


async def _pause_one_process_fails(target, kind: str) -> None:
    """Process (here + 1) fails its share of an abort pause (*kind*, see :func:`fault`)."""
    async with Api(target) as api:
        tasks = start(api, 4, f"undo-{kind}")
        await api.wait_in_flight(4)
        # Sent to the process that keeps the pause state (any other passes the pause to it).
        async with pinned(api, PAUSE_OWNER) as (http, here, count):
            failing = (here + 1) % count
            async with fault(api, failing, "finish_pause", kind):
                response = await http.post("/pause", json={"mode": "abort"})
        if kind == "stop":
            await read_late_call(target, "enter_pause")
        message = response.json()["error"]["message"] if response.status_code == 503 else response.text
        states = [(await fresh_call(api, "GET", "/is_paused")) for _ in range(12)]
        loads = [(await fresh_call(api, "GET", "/v1/loads")) for _ in range(6)]
        short = [(await fresh_call(api, "POST", "/partial_generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}))
                 for _ in range(6)]
        await api.ok("POST", "/abort_requests", {"wait": True})
        answers = await asyncio.gather(*tasks)
    assert response.status_code == 503, response.text
    others = ", ".join(str(i) for i in range(count) if i != failing)
    if kind == "raise":
        # Every process entered the pause and the engine core was paused; one process failed
        # its share (cutting its requests): the engine core and every process are resumed.
        assert message.startswith(f"API process {failing} of {count} failed 'finish_pause': RuntimeError: injected fault"), message
        assert message.endswith(f"paused, then resumed: processes {', '.join(map(str, range(count)))}"), message
    else:
        assert message.startswith(f"API process {failing} of {count} did not answer 'enter_pause' within"), message
        assert f"in abort mode, then resumed: process{'es' if count > 2 else ''} {others}; left as it was" in message, message
        assert message.endswith(f"process {failing}"), message
    for r in states:
        assert r.json() == {"is_paused": False, "mode": None}, f"process {process_of(r)} is still paused"
    for r in loads:
        assert r.json()["paused"] is False, f"process {process_of(r)} reports a pause"
    for r in short:
        assert r.json()["finish_reason"] == "length", f"process {process_of(r)} does not generate: {r.json()}"
    assert len({process_of(r) for r in states}) >= 2, "setup: every check reached one process"
    for r in answers:
        assert_partial(r.json(), target.long_tokens)


@pytest.mark.targets(*RAISE_TARGETS)
async def test_a_bump_one_process_misses_by_raising_is_named_and_a_retry_completes_it_without_counting_twice(target):
    await _bump_one_process_misses(target, "raise")


async def test_a_bump_one_process_misses_by_stopping_is_named_and_a_retry_completes_it_without_counting_twice(target):
    await _bump_one_process_misses(target, "stop")


async def _bump_one_process_misses(target, kind: str) -> None:
    """Process (here + 1) misses a bump (*kind*, see :func:`fault`); a retry completes it."""
    async with Api(target) as api:
        before = (await api.loads())["weight_version"]
        new, later = f"{before}-{kind}-missed", f"{before}-{kind}-later"
        async with pinned(api) as (http, here, count):
            failing = (here + 1) % count
            async with fault(api, failing, "record_bump", kind):
                response = await http.post("/update_weight_version", json={"new_version": new})
        if kind == "stop":
            await read_late_call(target, "record_bump")
        # Stale at the next bump: the retry is that bump only where the first call was missed. One
        # of them pinned to the process that missed it: 12 spread at random miss a given one of
        # three processes once in 130 runs (a fresh-machine run saw it).
        tasks = [*start(api, N - 1, f"missed-{kind}", max_staleness=1),
                 start_on(api, failing, f"missed-{kind}-there", max_staleness=1)]
        await api.wait_in_flight(N)
        retry = await fresh_call(api, "POST", "/update_weight_version", {"new_version": new})
        loads = [(await fresh_call(api, "GET", "/v1/loads")).json() for _ in range(6)]
        repeat = await fresh_call(api, "POST", "/update_weight_version", {"new_version": new})
        await api.ok("POST", "/abort_requests", {"wait": True})
        answers = await asyncio.gather(*tasks)
        await fresh_call(api, "POST", "/update_weight_version", {"new_version": later})
    assert response.status_code == 503, response.text
    message = response.json()["error"]["message"]
    applied = [i for i in range(count) if i != failing]
    named = f"process{'es' if len(applied) > 1 else ''} {', '.join(map(str, applied))}"
    assert message.startswith(f"API process {failing} of {count} "), message
    assert f"at {new!r} now: {named}; a retry bumps only the processes not yet at {new!r}" in message, message
    assert retry.json()["new_version"] == new and retry.json()["aborted"] == 0
    if process_of(retry) != failing:
        assert retry.json()["message"] == f"Weight version updated to {new} on process {failing}; the others were at it already"
    for entry in loads:
        assert entry["weight_version"] == new, f"after the retry: {entry}"
    assert repeat.json()["message"] == f"already at {new}"
    for r in answers:
        expected = "stale" if process_of(r) == failing else "abort"
        assert r.json()["cancel_reason"] == expected, f"request on process {process_of(r)} (process {failing} missed the bump): {r.json()}"
    assert {process_of(r) for r in answers} - {failing} and failing in {process_of(r) for r in answers}, "setup: the requests missed a side"


async def test_the_peer_sockets_refuse_a_call_without_the_servers_key(target):
    processes = api_processes(target)
    assert len(processes) >= 2, f"setup: found the peer sockets {processes}"
    refusals = []
    for _, path in processes.values():
        # A process of the same user (another server, or anything else) that finds the socket.
        for call in ({"op": "pause", "args": {"mode": "abort", "timeout_s": 1.0, "clear_cache": None}},
                     {"op": "pause", "args": {"mode": "abort", "timeout_s": 1.0, "clear_cache": None},
                      "key": "0" * 64, "start_by": time.time() + 60}):
            reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(json.dumps(call).encode() + b"\n")
            refusals.append(json.loads(await reader.readline()))
            writer.close()
    async with Api(target) as api:
        states = [(await fresh_call(api, "GET", "/is_paused")).json() for _ in range(12)]
    assert all(r == {"error": "refused: the call does not carry this server's key"} for r in refusals), refusals
    assert all(s == {"is_paused": False, "mode": None} for s in states), states
