"""POST /update_weight_version: keeps in-flight requests by default; later tokens carry the new version."""

import asyncio
import uuid

import pytest

from .api import Api, assert_partial

pytestmark = pytest.mark.anyio


async def test_bump_keeps_in_flight_requests_and_attributes_later_tokens(target):
    n = 8
    new = f"v-{uuid.uuid4().hex[:8]}"
    async with Api(target) as api:
        old = (await api.loads())["weight_version"]
        await api.warm(n)
        # SGLang's usual payload: no abort_all_requests, which SGLang itself defaults to true.
        tasks = api.start(n, target.finish_tokens, prefix="bump")
        await api.wait_in_flight(n, running=True)
        result = await api.ok("POST", "/update_weight_version", {"new_version": new})
        assert not any(t.done() for t in tasks), "setup: a request ran out before the bump answered"
        results = await asyncio.gather(*tasks)
        loads = await api.loads()
    assert result == {"success": True, "new_version": new, "previous_version": old, "aborted": 0, "message": f"Weight version updated to {new}"}
    assert loads["weight_version"] == new
    for r in results:
        assert r["finish_reason"] == "length" and r["cancelled"] is False and len(r["output_ids"]) == target.finish_tokens
        assert_partial(r, target.finish_tokens)
        assert r["weight_versions"][-1]["version"] == new
        assert {s["version"] for s in r["weight_versions"]} <= {old, new}
    assert any(r["weight_versions"][0]["version"] == old for r in results), "tokens before the bump keep the old version"


async def test_bump_with_abort_all_requests_aborts_them(target):
    n = 4
    async with Api(target) as api:
        await api.warm(n)
        tasks = api.start(n, target.long_tokens, prefix="bump-abort")
        await api.wait_in_flight(n)
        result = await api.ok("POST", "/update_weight_version", {"new_version": "aborting", "abort_all_requests": True})
        results = await asyncio.gather(*tasks)
    assert result["aborted"] == n and result["new_version"] == "aborting"
    for r in results:
        assert r["cancelled"] is True
        assert all(s["version"] != "aborting" for s in r["weight_versions"])
