"""POST /partial_generate: token ids in; tokens, logprobs and weight-version spans out."""

import asyncio
import contextlib

import httpx

import pytest

from .api import Api, assert_partial

pytestmark = pytest.mark.anyio


async def test_generates_to_length_with_one_logprob_per_token(target):
    async with Api(target) as api:
        version = (await api.loads())["weight_version"]
        result = await api.generate(24, request_id="complete-1")
    assert result["request_id"] == "complete-1"
    assert result["finish_reason"] == "length" and result["cancelled"] is False
    assert len(result["output_ids"]) == 24
    assert_partial(result, 24)
    assert result["weight_versions"] == [{"version": version, "start": 0, "end": 24}]


async def test_request_id_is_chosen_when_absent(target):
    async with Api(target) as api:
        first, second = await asyncio.gather(api.generate(4), api.generate(4))
    assert first["request_id"] and second["request_id"] and first["request_id"] != second["request_id"]


async def test_a_seed_is_honoured_or_refused_never_ignored(target):
    async with Api(target) as api:
        if target.honours_seed:
            a = await api.generate(16, seed=1234, temperature=1.0)
            b = await api.generate(16, seed=1234, temperature=1.0)
            assert a["output_ids"] == b["output_ids"]
        else:
            refused = await api.post("/partial_generate", {"input_ids": [1, 2], "sampling_params": {"seed": 1234}})
            assert refused.status_code == 400
            assert "sampling_params.seed" in refused.json()["error"]["message"]


async def test_a_request_id_already_in_flight_is_a_conflict(target):
    async with Api(target) as api:
        [task] = api.start(1, target.long_tokens, prefix="dup")
        await api.wait_in_flight(1)
        response = await api.post("/partial_generate", {"input_ids": [1, 2, 3], "request_id": "dup-0"})
        assert response.status_code == 409
        assert "dup-0" in response.json()["error"]["message"]
        await api.ok("POST", "/abort_requests", {"request_ids": ["dup-0"]})
        result = await task
    assert result["cancelled"] is True
    assert_partial(result, target.long_tokens)


async def test_a_client_that_hangs_up_aborts_its_request(target):
    async with Api(target) as api:
        async with httpx.AsyncClient(base_url=target.url, headers={"Authorization": f"Bearer {target.api_key}"}) as quitter:
            task = asyncio.create_task(
                quitter.post("/partial_generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": target.long_tokens, "ignore_eos": True}})
            )
            await api.wait_in_flight(1, running=True)
            # Frozen by a keep pause, the request cannot finish by itself: only the hang-up ends it.
            await api.ok("POST", "/pause", {"mode": "keep"})
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await api.wait_for("the abandoned request to be released", lambda loads: loads["in_flight"] == 0)
        finally:
            await api.ok("POST", "/resume")
