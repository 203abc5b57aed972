"""POST /partial_generate: token ids in; tokens, logprobs and weight-version spans out."""

import asyncio

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


async def test_same_seed_gives_same_tokens(target):
    async with Api(target) as api:
        a = await api.generate(16, seed=1234, temperature=1.0)
        b = await api.generate(16, seed=1234, temperature=1.0)
    assert a["output_ids"] == b["output_ids"]


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
