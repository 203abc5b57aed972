"""POST /weight_swap/begin and /weight_swap/commit: one transaction around the trainer's own
weight transfer, the same on every engine: the pause holds until the commit, the commit applies
the version once and always resumes, and a swap left open past its lease says so."""

import asyncio
import time
import uuid

import pytest

from engine_plugins.contract.schema import WeightSwapResult

from .api import Api, assert_partial

pytestmark = pytest.mark.anyio


async def begin(api: Api, version: str, **body) -> dict:
    """``POST /weight_swap/begin``, 200 or fail; the answer checked against its model."""
    answer = await api.ok("POST", "/weight_swap/begin", {"version": version, **body})
    WeightSwapResult.model_validate(answer)
    return answer


async def commit(api: Api, **body) -> dict:
    """``POST /weight_swap/commit``, 200 or fail."""
    answer = await api.ok("POST", "/weight_swap/commit", body)
    WeightSwapResult.model_validate(answer)
    return answer


async def test_a_keep_swap_holds_the_requests_until_the_commit_which_applies_the_version_once(target):
    n = 4
    new = f"swap-{uuid.uuid4().hex[:8]}"
    async with Api(target) as api:
        old = (await api.loads())["weight_version"]
        await api.warm(n)
        tasks = api.start(n, target.finish_tokens, prefix="swap-keep")
        await api.wait_in_flight(n, running=True)
        opened = await begin(api, new, mode="keep", clear_cache=False)
        paused = await api.ok("GET", "/is_paused")
        loads = await api.loads()
        second = await api.post("/weight_swap/begin", {"version": "another"})
        assert not any(t.done() for t in tasks), "setup: a request ran out before the swap was begun"
        committed = await commit(api, version=new)
        results = await asyncio.gather(*tasks)
        after = await api.ok("GET", "/is_paused")
        version = (await api.loads())["weight_version"]
        again = await api.post("/weight_swap/commit", {"swap_id": opened["swap_id"]})
    assert opened["state"] == "open" and opened["is_paused"] is True and opened["previous_version"] == old
    assert opened["swap_id"].startswith("ws-") and opened["lease_expires_at"] > time.time()
    assert paused["is_paused"] is True and paused["mode"] == "keep"
    assert paused["weight_swap"]["swap_id"] == opened["swap_id"] and paused["weight_swap"]["expired"] is False
    assert loads["weight_swap"]["version"] == new and loads["weight_version"] == old, "the version changes at the commit"
    assert second.status_code == 409 and opened["swap_id"] in second.json()["error"]["message"]
    assert committed == {"swap_id": opened["swap_id"], "version": new, "previous_version": old, "state": "committed",
                         "is_paused": False, "lease_expires_at": None}
    assert after == {"is_paused": False, "mode": None} and version == new
    assert again.status_code == 404 and "no swap is open" in again.json()["error"]["message"]
    for r in results:
        assert r["finish_reason"] == "length" and len(r["output_ids"]) == target.finish_tokens
        assert_partial(r, target.finish_tokens)
        assert [s["version"] for s in r["weight_versions"]] == [old, new], "kept across the swap, one bump"


async def test_an_abort_swap_returns_the_requests_with_their_tokens_and_refuses_new_ones_until_the_commit(target):
    n = 4
    new = f"swap-{uuid.uuid4().hex[:8]}"
    async with Api(target) as api:
        await api.warm(n)
        tasks = api.start(n, target.long_tokens, prefix="swap-abort")
        await api.wait_in_flight(n, running=True)
        opened = await begin(api, new, mode="abort")
        results = await asyncio.gather(*tasks)
        during = await api.generate(8)
        await commit(api, swap_id=opened["swap_id"])
        fresh = await api.generate(8)
    for r in results:
        assert r["cancelled"] is True and r["cancel_reason"] == "pause" and len(r["output_ids"]) > 0
    assert during["cancelled"] is True and during["output_ids"] == []
    assert fresh["finish_reason"] == "length" and [s["version"] for s in fresh["weight_versions"]] == [new]


async def test_a_swap_left_open_past_its_lease_says_so_and_keeps_the_server_paused(target):
    new = f"swap-{uuid.uuid4().hex[:8]}"
    async with Api(target) as api:
        opened = await begin(api, new, mode="keep", lease_s=0.2)
        await asyncio.sleep(0.5)
        paused = await api.ok("GET", "/is_paused")
        loads = await api.loads()
        # A new trainer may begin again over an expired swap (it takes the pause over).
        retried = await begin(api, new, mode="keep")
        committed = await commit(api, version=new)
    assert paused["is_paused"] is True and paused["weight_swap"]["swap_id"] == opened["swap_id"]
    assert paused["weight_swap"]["expired"] is True and loads["weight_swap"]["expired"] is True
    assert loads["paused"] is True
    assert retried["swap_id"] != opened["swap_id"] and committed["swap_id"] == retried["swap_id"]


@pytest.mark.parametrize("body, named", [
    ({}, "give swap_id or version"),
    ({"swap_id": "ws-1", "version": "v"}, "give swap_id or version"),
    ({"swap_id": "ws-unknown"}, "no open weight swap with id 'ws-unknown'"),
])
async def test_a_commit_that_names_no_open_swap_is_refused_and_changes_nothing(target, body, named):
    async with Api(target) as api:
        before = await api.loads()
        response = await api.post("/weight_swap/commit", body)
        after = await api.loads()
    assert response.status_code in (400, 404) and named in response.json()["error"]["message"]
    assert after["weight_version"] == before["weight_version"] and after["paused"] is False
