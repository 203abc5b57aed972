"""POST /pause, /resume and GET /is_paused: abort mode returns work now, keep mode freezes it."""

import asyncio

import pytest

from .api import Api, assert_partial, total_reqs

pytestmark = pytest.mark.anyio


async def test_pause_abort_returns_in_flight_work_and_refuses_new_work_until_resume(target):
    n = 8
    async with Api(target) as api:
        await api.warm(n)
        tasks = api.start(n, target.long_tokens, prefix="pause-abort")
        await api.wait_in_flight(n, running=True)
        state = await api.ok("POST", "/pause")  # mode defaults to abort
        assert state == {"is_paused": True, "mode": "abort"}
        results = await asyncio.gather(*tasks)
        assert await api.ok("GET", "/is_paused") == {"is_paused": True, "mode": "abort"}
        refused = await api.generate(8, request_id="while-paused")
        loads = await api.loads()
        assert loads["paused"] is True and total_reqs(loads) == 0
        assert await api.ok("POST", "/resume") == {"is_paused": False, "mode": None}
        after = await api.generate(8)
    for r in results:
        assert r["cancelled"] is True and len(r["output_ids"]) > 0
        assert_partial(r, target.long_tokens)
    assert refused["cancelled"] is True and refused["output_ids"] == [] and refused["finish_reason"] == "abort"
    assert after["finish_reason"] == "length" and len(after["output_ids"]) == 8


async def test_pause_keep_holds_requests_and_continues_them_after_resume(target):
    n, m = 4, 4
    async with Api(target) as api:
        await api.warm(n + m)
        running = api.start(n, target.long_tokens, prefix="keep-run")
        await api.wait_in_flight(n, running=True)
        assert await api.ok("POST", "/pause", params={"mode": "keep"}) == {"is_paused": True, "mode": "keep"}
        arriving = api.start(m, target.long_tokens, prefix="keep-new")
        loads = await api.wait_in_flight(n + m)
        assert total_reqs(loads) == n + m, "requests held during the pause are counted"
        assert not any(t.done() for t in running + arriving)
        await api.ok("POST", "/resume")
        results = await asyncio.gather(*running, *arriving)
    for r in results:
        assert r["finish_reason"] == "length" and r["cancelled"] is False and len(r["output_ids"]) == target.long_tokens
        assert_partial(r, target.long_tokens)


async def test_abort_all_during_keep_pause_covers_requests_that_arrived_while_paused(target):
    n, m = 4, 8
    async with Api(target) as api:
        await api.warm(n + m)
        running = api.start(n, target.long_tokens, prefix="fence-run")
        await api.wait_in_flight(n, running=True)
        await api.ok("POST", "/pause", {"mode": "keep"})
        arriving = api.start(m, target.long_tokens, prefix="fence-new")
        await api.wait_in_flight(n + m)
        result = await api.ok("POST", "/abort_requests", {"wait": True})
        assert result["aborted"] == n + m and result["idle"] is True
        held = await asyncio.gather(*arriving)
        frozen = await asyncio.gather(*running)
        await api.ok("POST", "/resume")
        loads = await api.loads()
    assert loads["in_flight"] == 0 and total_reqs(loads) == 0, "nothing generates after resume"
    for r in held:
        assert r["cancelled"] is True and r["output_ids"] == []
    for r in frozen:
        assert r["cancelled"] is True and len(r["output_ids"]) > 0
        assert_partial(r, target.long_tokens)


async def test_pause_mode_in_query_or_body_and_resume_is_idempotent(target):
    async with Api(target) as api:
        assert await api.ok("POST", "/resume") == {"is_paused": False, "mode": None}
        assert await api.ok("POST", "/pause", {"mode": "keep"}) == {"is_paused": True, "mode": "keep"}
        assert await api.ok("POST", "/pause", params={"mode": "abort"}) == {"is_paused": True, "mode": "abort"}
        conflict = await api.post("/pause", {"mode": "keep"}, params={"mode": "abort"})
        assert conflict.status_code == 400 and "mode" in conflict.json()["error"]["message"]
        assert await api.ok("POST", "/resume") == {"is_paused": False, "mode": None}
        assert await api.ok("POST", "/resume") == {"is_paused": False, "mode": None}
        assert await api.ok("GET", "/is_paused") == {"is_paused": False, "mode": None}
