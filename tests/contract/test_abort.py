"""POST /abort_requests: a fence over every accepted request, exact ids, and waiting."""

import asyncio

import pytest

from .api import Api, assert_partial, total_reqs

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("body", [None, {}, {"request_ids": []}], ids=["no-body", "empty-object", "empty-ids"])
async def test_abort_all_covers_every_request_and_salvages_partial_tokens(target, body):
    n = 32
    async with Api(target) as api:
        await api.warm(n)
        tasks = api.start(n, target.long_tokens, prefix="all")
        await api.wait_in_flight(n, running=True)
        request = {"wait": True} if body is None else {**body, "wait": True}
        if body is None:
            # The body is optional: abort first with no body at all, then wait with one.
            first = await api.ok("POST", "/abort_requests")
            assert first["aborted"] == n
            request = {"wait": True}
        result = await api.ok("POST", "/abort_requests", request)
        results = await asyncio.gather(*tasks)
        loads = await api.loads()
    if body is not None:
        assert result["aborted"] == n
    assert result["status"] == "aborted" and result["idle"] is True and result["in_flight"] == 0
    assert total_reqs(loads) == 0 and loads["in_flight"] == 0
    for r in results:
        assert r["finish_reason"] == "abort" and r["cancelled"] is True
        assert 0 < len(r["output_ids"]) < target.long_tokens, "running requests keep their partial tokens"
        assert_partial(r, target.long_tokens)


async def test_abort_by_id_is_exact_not_by_prefix(target):
    async with Api(target) as api:
        await api.warm(3)
        one = asyncio.create_task(api.generate(target.long_tokens, request_id="job-1"))
        ten = asyncio.create_task(api.generate(target.long_tokens, request_id="job-10"))
        other = asyncio.create_task(api.generate(target.long_tokens, request_id="job-1-b"))
        await api.wait_in_flight(3)
        result = await api.ok("POST", "/abort_requests", {"request_ids": ["job-1"], "wait": True})
        assert result["aborted"] == 1
        assert result["in_flight"] == 2 and result["idle"] is False
        assert (await one)["cancelled"] is True
        assert not ten.done() and not other.done()
        assert (await api.loads())["in_flight"] == 2
        rest = await api.ok("POST", "/abort_requests", {"request_ids": ["job-10", "job-1-b"], "wait": True})
        assert rest["aborted"] == 2 and rest["idle"] is True
        assert (await ten)["cancelled"] and (await other)["cancelled"]


async def test_unknown_ids_are_not_an_error_and_abort_nothing(target):
    async with Api(target) as api:
        [task] = api.start(1, target.long_tokens, prefix="known")
        await api.wait_in_flight(1)
        result = await api.ok("POST", "/abort_requests", {"request_ids": ["no-such-request", "known"], "wait": True})
        assert result["aborted"] == 0 and result["in_flight"] == 1
        await api.ok("POST", "/abort_requests", {"request_ids": ["known-0"], "wait": True})
        assert (await task)["cancelled"] is True


async def test_abort_when_idle_reports_nothing_to_do(target):
    async with Api(target) as api:
        result = await api.ok("POST", "/abort_requests", {"wait": True, "timeout_s": 5})
    assert result == {"status": "aborted", "aborted": 0, "in_flight": 0, "idle": True, "timed_out": False}
