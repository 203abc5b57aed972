"""Fencing stale rollouts: aborts by admission version, partial generations that abort themselves
once too stale, and loads by version. Versions are ordered by the server's bumps (docs/contract.md)."""

import asyncio
import uuid
from typing import Optional

import pytest

from .api import Api, assert_partial

pytestmark = pytest.mark.anyio


def fresh(tag: str) -> str:
    """A version name this server has never had (the suite shares one server per target)."""
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def start(api: Api, prefix: str, n: int, max_new_tokens: int, max_staleness: Optional[int] = None) -> list[asyncio.Task]:
    """*n* partial generations in the background, ids ``{prefix}-{i}``, with *max_staleness*."""

    def body(i: int) -> dict:
        out = {
            "input_ids": [1, 15, 27, 33, 41],
            "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True},
            "request_id": f"{prefix}-{i}",
        }
        if max_staleness is not None:
            out["max_staleness"] = max_staleness
        return out

    return [asyncio.create_task(api.ok("POST", "/partial_generate", body(i))) for i in range(n)]


async def bump(api: Api, version: str) -> dict:
    """A version bump that keeps in-flight requests."""
    return await api.ok("POST", "/update_weight_version", {"new_version": version, "abort_all_requests": False})


def outlived(tasks: list[asyncio.Task], what: str) -> None:
    """A setup failure if one of *tasks*, meant to outlive the arranging, has already run to its
    end; a failure of the test itself if it was cut (nothing here should have aborted it)."""
    for task in tasks:
        if not task.done():
            continue
        if task.exception() is None and task.result()["cancelled"]:
            raise AssertionError(f"{what} was aborted while the test arranged things: {task.result()}")
        raise AssertionError(f"setup: {what} ended before the test was arranged: {task.exception() or task.result()}")


def ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


def assert_stale(result: dict, versions: set, max_new_tokens: int) -> None:
    """Cut for staleness, with every token so far and spans in the versions it lived through."""
    assert result["cancelled"] is True and result["finish_reason"] == "abort"
    assert result["cancel_reason"] == "stale"
    assert_partial(result, max_new_tokens)
    assert {s["version"] for s in result["weight_versions"]} <= versions


async def test_admitted_before_aborts_exactly_the_older_requests_and_keeps_the_newer(target):
    v1, v2 = fresh("before-1"), fresh("before-2")
    async with Api(target) as api:
        await api.warm(5)
        await bump(api, v1)
        old = start(api, "before-old", 3, target.long_tokens)
        await api.wait_in_flight(3, running=True)
        await bump(api, v2)
        new = start(api, "before-new", 2, target.long_tokens)
        await api.wait_in_flight(5)
        outlived(old + new, "a request")
        result = await api.ok("POST", "/abort_requests", {"admitted_before": v2, "wait": True})
        olds = await asyncio.gather(*old)
        loads = await api.loads()
        rest = await api.ok("POST", "/abort_requests", {"request_ids": ids("before-new", 2), "wait": True})
        news = await asyncio.gather(*new)
    assert result == {"status": "aborted", "aborted": 3, "in_flight": 2, "idle": False, "timed_out": False}
    assert loads["in_flight"] == 2 and loads["in_flight_by_version"] == {v2: 2}, "the newer requests are kept"
    for r in olds:
        assert_stale(r, {v1, v2}, target.long_tokens)
        assert r["output_ids"], "they ran before the abort: their tokens are returned"
    assert rest["aborted"] == 2 and rest["idle"] is True
    for r in news:
        assert r["cancel_reason"] == "abort"
        assert {s["version"] for s in r["weight_versions"]} <= {v2}


async def test_a_version_named_again_means_its_latest_bump(target):
    x, y = fresh("again-x"), fresh("again-y")
    async with Api(target) as api:
        await api.warm(3)
        await bump(api, x)
        first = start(api, "again-1", 1, target.long_tokens)
        await api.wait_in_flight(1)
        await bump(api, y)
        second = start(api, "again-2", 1, target.long_tokens)
        await api.wait_in_flight(2)
        await bump(api, x)
        third = start(api, "again-3", 1, target.long_tokens)
        await api.wait_in_flight(3)
        outlived(first + second + third, "a request")
        result = await api.ok("POST", "/abort_requests", {"admitted_before": x, "wait": True})
        aborted = await asyncio.gather(*first, *second)
        loads = await api.loads()
        await api.ok("POST", "/abort_requests", {"request_ids": ["again-3-0"], "wait": True})
        await asyncio.gather(*third)
    assert result["aborted"] == 2 and result["in_flight"] == 1
    assert all(r["cancel_reason"] == "stale" for r in aborted)
    assert loads["in_flight_by_version"] == {x: 1}


async def test_max_staleness_aborts_the_requests_admitted_that_many_bumps_ago_or_more(target):
    a, b = fresh("stale-a"), fresh("stale-b")
    async with Api(target) as api:
        await api.warm(5)
        before = (await api.loads())["weight_version"]
        s0 = start(api, "stale-0", 2, target.long_tokens)
        await api.wait_in_flight(2, running=True)
        await bump(api, a)
        s1 = start(api, "stale-1", 2, target.long_tokens)
        await api.wait_in_flight(4)
        await bump(api, b)
        s2 = start(api, "stale-2", 1, target.long_tokens)
        await api.wait_in_flight(5)
        outlived(s0 + s1 + s2, "a request")
        two = await api.ok("POST", "/abort_requests", {"max_staleness": 2, "wait": True})
        r0 = await asyncio.gather(*s0)
        one = await api.ok("POST", "/abort_requests", {"max_staleness": 1, "wait": True})
        r1 = await asyncio.gather(*s1)
        loads = await api.loads()
        await api.ok("POST", "/abort_requests", {"request_ids": ["stale-2-0"], "wait": True})
        (r2,) = await asyncio.gather(*s2)
    assert (two["aborted"], two["in_flight"]) == (2, 3), "two bumps ago: only the first two"
    assert (one["aborted"], one["in_flight"]) == (2, 1), "one bump ago: the next two"
    for r in r0:
        assert_stale(r, {before, a, b}, target.long_tokens)
    for r in r1:
        assert_stale(r, {a, b}, target.long_tokens)
    assert loads["in_flight"] == 1 and loads["in_flight_by_version"] == {b: 1}
    assert r2["cancel_reason"] == "abort"


async def test_a_selector_naming_an_unknown_version_or_malformed_is_a_400_and_touches_nothing(target):
    never = fresh("never-seen")
    async with Api(target) as api:
        task = start(api, "untouched", 1, target.long_tokens)
        await api.wait_in_flight(1)
        unknown = await api.post("/abort_requests", {"admitted_before": never, "wait": True})
        bad = []
        for named, body in [
            ("max_staleness", {"max_staleness": 0}),
            ("max_staleness", {"max_staleness": "1"}),
            ("request_ids and max_staleness", {"request_ids": ["untouched-0"], "max_staleness": 1}),
            ("admitted_before and max_staleness", {"admitted_before": never, "max_staleness": 1}),
        ]:
            bad.append((named, await api.post("/abort_requests", body)))
        loads = await api.loads()
        outlived(task, "the request")
        await api.ok("POST", "/abort_requests", {"request_ids": ["untouched-0"], "wait": True})
        (result,) = await asyncio.gather(*task)
    assert unknown.status_code == 400, unknown.text
    assert never in unknown.json()["error"]["message"]
    for named, response in bad:
        assert response.status_code == 400 and named in response.json()["error"]["message"], response.text
    assert loads["in_flight"] == 1
    assert result["cancel_reason"] == "abort"


async def test_a_partial_generation_with_max_staleness_aborts_itself_after_that_many_bumps(target):
    v1, v2 = fresh("self-1"), fresh("self-2")
    async with Api(target) as api:
        await api.warm(4)
        before = (await api.loads())["weight_version"]
        one = start(api, "self-k1", 1, target.long_tokens, max_staleness=1)
        probe = start(api, "self-probe", 1, target.long_tokens, max_staleness=2)
        two = start(api, "self-k2", 1, target.long_tokens, max_staleness=2)
        unlimited = start(api, "self-free", 1, target.long_tokens)
        everything = one + probe + two + unlimited
        await api.wait_in_flight(4, running=True)
        outlived(everything, "a request")
        first = await bump(api, v1)
        (r_one,) = await asyncio.gather(*one)
        # One bump is fewer than two: an abort by id finds the probe not yet aborted.
        probed = await api.ok("POST", "/abort_requests", {"request_ids": ["self-probe-0"], "wait": True})
        (r_probe,) = await asyncio.gather(*probe)
        await bump(api, v2)
        (r_two,) = await asyncio.gather(*two)
        loads = await api.loads()
        rest = await api.ok("POST", "/abort_requests", {"request_ids": ["self-free-0"], "wait": True})
        (r_free,) = await asyncio.gather(*unlimited)
    assert first["aborted"] == 0, "a bump's own count is of abort_all_requests only"
    assert_stale(r_one, {before, v1}, target.long_tokens)
    assert r_one["output_ids"], "its tokens are returned"
    assert probed["aborted"] == 1 and r_probe["cancel_reason"] == "abort"
    assert_stale(r_two, {before, v1, v2}, target.long_tokens)
    assert r_two["output_ids"]
    assert loads["in_flight"] == 1
    assert rest["aborted"] == 1 and r_free["cancel_reason"] == "abort", "no limit: untouched by any bump"


async def test_max_staleness_of_a_partial_generation_is_checked(target):
    async with Api(target) as api:
        for bad in (0, "1", 1.5):
            response = await api.post("/partial_generate", {"input_ids": [1, 2], "max_staleness": bad})
            assert response.status_code == 400 and "max_staleness" in response.json()["error"]["message"], response.text


async def test_loads_count_in_flight_requests_by_admission_version(target):
    v1, v2 = fresh("loads-1"), fresh("loads-2")
    async with Api(target) as api:
        await api.warm(3)
        await bump(api, v1)
        first = start(api, "by-version-1", 2, target.long_tokens)
        await api.wait_in_flight(2)
        await bump(api, v2)
        second = start(api, "by-version-2", 1, target.long_tokens)
        loads = await api.wait_in_flight(3)
        outlived(first + second, "a request")
        await api.ok("POST", "/abort_requests", {"wait": True})
        await asyncio.gather(*first, *second)
        idle = await api.loads()
    assert loads["in_flight_by_version"] == {v1: 2, v2: 1} and list(loads["in_flight_by_version"]) == [v1, v2]
    assert sum(loads["in_flight_by_version"].values()) == loads["in_flight"]
    assert idle["in_flight_by_version"] == {}
