"""Engine-neutral rules of the control that are easiest to see without HTTP (and, for bumps,
through the stub engine's routes)."""

import asyncio

import pytest
from hook_app import stub_app

from engine_plugins.core.control import InFlightCounts, _reconcile, _spans, new_rid
from engine_plugins.contract.schema import WeightVersionSpan
from engine_plugins.core.seam import Generation


def test_engine_ids_have_a_fixed_length_so_prefix_matching_cannot_spread():
    rids = {new_rid() for _ in range(100)}
    assert len(rids) == 100 and {len(r) for r in rids} == {35}


def test_held_requests_are_folded_in_as_waiting():
    ranks = [{"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 0}, {"dp_rank": 1, "num_running_reqs": 1, "num_waiting_reqs": 0}]
    _reconcile(ranks, in_flight=6)
    assert ranks[0]["num_waiting_reqs"] == 3 and sum(r["num_running_reqs"] + r["num_waiting_reqs"] for r in ranks) == 6


def test_a_frozen_snapshot_cannot_report_requests_that_are_gone():
    ranks = [{"dp_rank": 0, "num_running_reqs": 4, "num_waiting_reqs": 2}]
    _reconcile(ranks, in_flight=0)
    assert ranks == [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]


def test_engine_spans_win_when_they_cover_the_output():
    engine = [WeightVersionSpan(version="a", start=0, end=2), WeightVersionSpan(version="b", start=2, end=3)]
    assert _spans(Generation([1, 2, 3], [0, 0, 0], "length", engine), [(0, "x")]) == engine


def test_spans_from_version_changes_when_the_engine_reports_none():
    spans = _spans(Generation([1, 2, 3, 4], [0] * 4, "length"), [(0, "a"), (3, "b"), (3, "c")])
    assert [s.model_dump() for s in spans] == [{"version": "a", "start": 0, "end": 3}, {"version": "c", "start": 3, "end": 4}]


def test_counts_of_several_front_ends_merge_oldest_version_first():
    # The process answering holds only the newest request: its version must still come last.
    answering = InFlightCounts(1, {"v2": 1}, {"v2": 0})
    peer = InFlightCounts(3, {"v1": 2, "v2": 1}, {"v1": 1, "v2": 0})
    merged = answering.plus(peer)
    assert list(merged.by_version.items()) == [("v1", 2), ("v2", 2)]
    assert merged.in_flight == 4 and merged.age == {"v1": 1, "v2": 0}
    # A name bumped to twice sits where its oldest requests were admitted.
    again = InFlightCounts(1, {"v1": 1}, {"v1": 0}).plus(InFlightCounts(2, {"v1": 1, "v0": 1}, {"v1": 2, "v0": 3}))
    assert list(again.by_version) == ["v0", "v1"] and again.by_version["v1"] == 2


def test_a_front_end_that_missed_a_bump_still_merges_in_bump_order():
    # Process A took bumps a, b, c (generations 1-3); process B failed b and took a, c
    # (generations 1-2). B's generation of c is A's of b: only ages compare.
    a = InFlightCounts(1, {"c": 1}, {"c": 0})
    b = InFlightCounts(2, {"a": 1, "c": 1}, {"a": 1, "c": 0})
    assert list(a.plus(b).by_version) == ["a", "c"] and list(b.plus(a).by_version) == ["a", "c"]


# --- bumps: a bump to the version in force is a no-op ----------------------------------------


async def _bump(stub, version, abort_all_requests=False):
    return await stub.ok("update_weight_version", {"new_version": version, "abort_all_requests": abort_all_requests})


@pytest.mark.anyio
async def test_a_repeated_bump_is_a_no_op_so_a_retry_does_not_age_requests():
    async with stub_app() as stub:
        await _bump(stub, "v8")
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 100_000}, "request_id": "one-bump", "max_staleness": 1}
        task = asyncio.create_task(stub.http.post("/partial_generate", json=body))
        await stub.wait_in_flight(1)
        generation = stub.control.versions.current
        # A client's retry after a lost answer, and a trainer sending the version with every
        # chunk of one swap, with and without abort_all_requests.
        again = [await _bump(stub, "v8"), await _bump(stub, "v8", abort_all_requests=True)]
        loads = await stub.ok("loads")
        assert not task.done(), "a repeated bump aged the request past its max_staleness"
        assert stub.control.versions.current == generation
        await _bump(stub, "v9")
        answer = (await task).json()
    for result in again:
        assert result == {"success": True, "new_version": "v8", "previous_version": "v8", "aborted": 0, "message": "already at v8"}
    assert loads["in_flight"] == 1 and loads["in_flight_by_version"] == {"v8": 1}
    assert answer["cancel_reason"] == "stale", "the next real bump still counts"


@pytest.mark.anyio
async def test_a_bump_back_to_an_older_name_is_a_new_generation():
    async with stub_app() as stub:
        start = stub.control.versions.current
        results = [await _bump(stub, name) for name in ("v1", "v2", "v1")]
        assert stub.control.versions.current == start + 3
    assert [r["previous_version"] for r in results[1:]] == ["v1", "v2"]
    assert all(r["message"].startswith("Weight version updated to") for r in results)
