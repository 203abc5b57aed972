"""Fencing stale requests through the stub engine's routes: what the abort hook sees, the
control's own stale aborts at a bump, cancel reasons, and refused selectors."""

import asyncio

import pytest
from hook_app import plugin_with, stub_app

pytestmark = pytest.mark.anyio


async def _bump(stub, version):
    return await stub.ok("update_weight_version", {"new_version": version})


async def test_a_selector_reaches_the_abort_hook_as_the_exact_ids_it_covers():
    seen = []

    def abort(request_ids, reason, http_request):
        seen.append((sorted(request_ids) if request_ids is not None else None, reason, http_request.url.path))

    async with stub_app({"watches": plugin_with("abort", abort)}) as stub:
        old = [stub.generate(100_000, f"old-{i}") for i in range(2)]
        await stub.wait_in_flight(2)
        await _bump(stub, "v1")
        new = stub.generate(100_000, "new-0")
        await stub.wait_in_flight(3)
        result = await stub.ok("abort", {"admitted_before": "v1", "wait": True})
        assert result["aborted"] == 2 and result["in_flight"] == 1
        answers = [(await task).json() for task in old]
        assert not new.done()
        nothing = await stub.ok("abort", {"max_staleness": 1})
        assert nothing == {"status": "aborted", "aborted": 0, "in_flight": 1, "idle": False, "timed_out": False}
        await stub.ok("abort", {"request_ids": ["new-0"], "wait": True})
        kept = (await new).json()
    # The empty selection never reached the hook: as ids it would have been [], every request.
    assert seen == [(["old-0", "old-1"], "stale", "/abort_requests"), (["new-0"], "request", "/abort_requests")]
    assert all(a["cancelled"] and a["cancel_reason"] == "stale" for a in answers)
    assert kept["cancel_reason"] == "abort"


async def test_max_staleness_counts_bumps_and_a_repeated_name_is_its_latest_bump():
    async with stub_app() as stub:
        first = stub.generate(100_000, "g0")
        await stub.wait_in_flight(1)
        await _bump(stub, "a")
        second = stub.generate(100_000, "g1")
        await stub.wait_in_flight(2)
        await _bump(stub, "b")
        third = stub.generate(100_000, "g2")
        await stub.wait_in_flight(3)
        await _bump(stub, "a")  # "a" again: now generation 3
        loads = await stub.ok("loads")
        assert loads["in_flight_by_version"] == {"default": 1, "a": 1, "b": 1}
        assert (await stub.ok("abort", {"max_staleness": 3}))["aborted"] == 1
        assert (await first).json()["cancel_reason"] == "stale"
        assert (await stub.ok("abort", {"admitted_before": "a", "wait": True}))["aborted"] == 2
        assert (await second).json()["cancelled"] and (await third).json()["cancelled"]


async def test_a_partial_generation_aborts_itself_at_the_bump_that_makes_it_stale():
    seen = []

    def abort(request_ids, reason, wait, http_request):
        seen.append((request_ids, reason, wait, http_request.url.path))

    async with stub_app({"watches": plugin_with("abort", abort)}) as stub:
        limited = asyncio.create_task(stub.http.post("/partial_generate", json={
            "input_ids": [1, 2], "sampling_params": {"max_new_tokens": 100_000}, "request_id": "lim", "max_staleness": 2,
        }))
        free = stub.generate(100_000, "free")
        await stub.wait_in_flight(2)
        bump = await _bump(stub, "v1")
        assert bump["aborted"] == 0 and not limited.done() and seen == []
        await _bump(stub, "v2")
        answer = (await limited).json()
        assert not free.done()
        await stub.ok("pause", {"mode": "abort"})
        paused = (await free).json()
        refused = (await stub.ok("partial_generate"))
        await stub.ok("resume")
    assert answer["cancelled"] is True and answer["finish_reason"] == "abort" and answer["cancel_reason"] == "stale"
    assert {s["version"] for s in answer["weight_versions"]} <= {"default", "v1", "v2"}
    assert seen[0] == (["lim"], "stale", False, "/update_weight_version")
    assert paused["cancel_reason"] == "pause" and refused["cancel_reason"] == "pause"


async def test_a_finished_or_uncancelled_generation_has_no_cancel_reason():
    async with stub_app() as stub:
        done = await stub.ok("partial_generate")
    assert done["cancelled"] is False and done["cancel_reason"] is None


async def test_a_decorating_plugin_that_drops_the_reason_still_marks_its_requests():
    async def abort(control, request_ids, wait, timeout_s):
        return await control.abort(request_ids, wait, timeout_s)

    async with stub_app({"decorates": plugin_with("abort", abort)}) as stub:
        task = stub.generate(100_000, "x")
        await stub.wait_in_flight(1)
        await _bump(stub, "v1")
        await stub.ok("abort", {"max_staleness": 1, "wait": True})
        assert (await task).json()["cancel_reason"] == "stale"


@pytest.mark.parametrize("body, named", [
    ({"admitted_before": "never-seen"}, "'never-seen'"),
    ({"max_staleness": 0}, "max_staleness"),
    ({"max_staleness": "1"}, "max_staleness"),
    ({"max_staleness": True}, "max_staleness"),
    ({"admitted_before": ""}, "admitted_before"),
    ({"request_ids": ["a"], "max_staleness": 1}, "request_ids and max_staleness"),
    ({"request_ids": [], "admitted_before": "default"}, "request_ids and admitted_before"),
    ({"admitted_before": "default", "max_staleness": 1}, "admitted_before and max_staleness"),
])
async def test_a_bad_selector_is_a_400_naming_it_and_aborts_nothing(body, named):
    async with stub_app() as stub:
        task = stub.generate(100_000, "keep")
        await stub.wait_in_flight(1)
        response = await stub.call("abort", body)
        assert response.status_code == 400 and named in response.json()["error"]["message"], response.text
        assert len(stub.control.registry) == 1 and not task.done()
        await stub.ok("abort", {"wait": True})
        await task


async def test_max_staleness_of_a_partial_generation_is_checked():
    async with stub_app() as stub:
        for bad in (0, -1, "2", 1.5):
            response = await stub.call("partial_generate", {"input_ids": [1], "max_staleness": bad})
            assert response.status_code == 400 and "max_staleness" in response.json()["error"]["message"]


async def test_a_version_set_behind_the_contracts_back_counts_as_a_bump_when_seen():
    async with stub_app() as stub:
        task = stub.generate(100_000, "before")
        await stub.wait_in_flight(1)
        await stub.control.seam.set_weight_version("native")  # as the engine's own route would
        loads = await stub.ok("loads")
        assert loads["weight_version"] == "native" and loads["in_flight_by_version"] == {"default": 1}
        assert (await stub.ok("abort", {"admitted_before": "native", "wait": True}))["aborted"] == 1
        await task


async def test_a_bump_with_abort_all_requests_says_so_in_the_cancel_reason():
    async with stub_app() as stub:
        task = stub.generate(100_000, "bumped")
        await stub.wait_in_flight(1)
        await stub.ok("update_weight_version", {"new_version": "v1", "abort_all_requests": True})
        assert (await task).json()["cancel_reason"] == "weight_version"
