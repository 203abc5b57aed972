"""Several API server processes behind one port: every rule holds whichever process gets a call.

Each answer names the process that gave it (``engine-plugins-api-server: INDEX/COUNT``), so
these tests see where every request and every control call landed, and check that a control
call covers requests held by other processes than its own.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from contract.api import Api, assert_partial
from engine_plugins.schema import AbortResult, LoadsResult, PartialGenerateResult

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-stub-api3", "vllm-api2", "vllm-dp2")]

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


def start(api: Api, n: int, prefix: str) -> list[asyncio.Task]:
    """*n* long generations, each on a connection of its own (so they spread over the processes)."""

    async def one(i: int) -> httpx.Response:
        body = {"input_ids": [1, 15, 27, 33, 41], "request_id": f"{prefix}-{i}",
                "sampling_params": {"max_new_tokens": api.target.long_tokens, "ignore_eos": True}}
        return await fresh_call(api, "POST", "/partial_generate", body)

    return [asyncio.create_task(one(i)) for i in range(n)]


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
    async with Api(target) as api:
        before = (await api.loads())["weight_version"]
        tasks = start(api, N, "bump")
        await api.wait_in_flight(N, running=True)
        bump = await fresh_call(api, "POST", "/update_weight_version", {"new_version": before + "-next"})
        assert bump.json()["aborted"] == 0
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
