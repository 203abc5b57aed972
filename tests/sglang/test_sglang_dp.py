"""SGLang with data parallelism (``--dp-size 2``): what the contract suite cannot see from one rank.

The contract suite runs unchanged on these targets too; these tests add that ``/v1/loads`` has one
entry per DP rank, each counting the requests its scheduler runs, that the contract's abort
by id finds a request on whichever rank SGLang's data-parallel controller sent it to, and that a
weight update the replicas cannot take is a 400 naming the one they can.
"""

import asyncio

import pytest

from contract.api import Api, total_reqs

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang-dp2", "sglang-stub-dp2")]

RANKS = 2
# SGLang's controller sends requests round robin: four requests put two on each rank.
N = 4


def per_rank(loads: dict) -> dict[int, int]:
    """Requests each rank reports, by ``dp_rank``."""
    return {rank["dp_rank"]: rank["num_total_reqs"] for rank in loads["loads"]}


def every_rank_runs(loads: dict) -> bool:
    """All N requests in the schedulers, and every rank running some of them."""
    running = [rank["num_running_reqs"] for rank in loads["loads"]]
    return loads["in_flight"] == N and sum(running) == N and all(running)


async def test_loads_have_one_entry_per_rank_and_each_counts_its_own_requests(target):
    async with Api(target) as api:
        idle = await api.loads()
        assert sorted(per_rank(idle)) == list(range(RANKS)) and total_reqs(idle) == 0
        await api.warm(N)
        tasks = api.start(N, target.long_tokens, prefix="dp-loads")
        try:
            loads = await api.wait_for("requests running on every rank", every_rank_runs)
            assert sorted(per_rank(loads)) == list(range(RANKS))
            assert all(count >= 1 for count in per_rank(loads).values()), loads["loads"]
            assert total_reqs(loads) == loads["aggregate"]["total_reqs"] == N
        finally:
            result = await api.ok("POST", "/abort_requests", {"wait": True})
            outs = await asyncio.gather(*tasks)
    assert result["idle"] is True and result["aborted"] == N
    assert all(out["finish_reason"] == "abort" for out in outs)
    after = await Api(target).loads()
    assert per_rank(after) == {rank: 0 for rank in range(RANKS)}


async def test_abort_by_id_finds_each_request_on_whichever_rank_holds_it(target):
    async with Api(target) as api:
        await api.warm(N)
        tasks = api.start(N, target.long_tokens, prefix="dp-byid")
        try:
            await api.wait_for("requests running on every rank", every_rank_runs)
            for i in range(N):
                result = await api.ok("POST", "/abort_requests", {"request_ids": [f"dp-byid-{i}"], "wait": True})
                # Exactly that request, wherever it ran; the others keep running.
                assert result["aborted"] == 1 and result["in_flight"] == N - 1 - i, (i, result)
                out = await tasks[i]
                assert out["finish_reason"] == "abort" and len(out["output_ids"]) < target.long_tokens
                for later in tasks[i + 1 :]:
                    assert not later.done(), f"aborting dp-byid-{i} ended another request"
        finally:
            await api.ok("POST", "/abort_requests", {"wait": True})
            await asyncio.gather(*tasks)


async def test_a_tensor_update_on_replicas_is_a_400_naming_the_disk_update_and_the_server_goes_on(target):
    # SGLang's replicas take weights only from disk: its own answer is an assert, a bare 500.
    async with Api(target) as api:
        before = await api.loads()
        response = await api.post("/update_weights_from_tensor", {"serialized_named_tensors": ["eA=="], "weight_version": "never"})
        after = await api.generate(4)
        loads = await api.loads()
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert "--dp-size 2" in message and "/update_weights_from_disk" in message and "nothing was loaded" in message
    assert after["finish_reason"] == "length" and loads["weight_version"] == before["weight_version"]


@pytest.mark.targets("sglang-dp2")  # the fake has no distributed update
async def test_a_weight_update_group_on_replicas_is_a_400_naming_the_disk_update(target):
    # The distributed update's first step: SGLang asserts a single replica here too (a bare 500).
    async with Api(target) as api:
        response = await api.post("/init_weights_update_group", {
            "master_address": "127.0.0.1", "master_port": 1, "rank_offset": 1, "world_size": 2, "group_name": "never",
            "backend": "gloo"})
        after = await api.generate(4)
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert "--dp-size 2" in message and "/update_weights_from_disk" in message and "no group was made" in message
    assert after["finish_reason"] == "length"
