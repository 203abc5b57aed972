"""Bad input gets a 400 that names the problem, and harms no request in flight."""

import asyncio
import json

import pytest

from engine_plugins.contract.schema import INT32_MAX, MAX_NAME_CHARS

from .api import Api, assert_partial, error_type

pytestmark = pytest.mark.anyio

# (path, raw body, words the error message must contain)
BAD_INPUTS = [
    ("/abort_requests", b"{not json", ["malformed JSON"]),
    ("/abort_requests", b"[1, 2]", ["JSON object", "list"]),
    ("/abort_requests", b'"all"', ["JSON object", "str"]),
    ("/abort_requests", b'{"request_ids": "job-1"}', ["request_ids"]),
    ("/abort_requests", b'{"request_ids": [1, 2]}', ["request_ids.0"]),
    ("/abort_requests", b'{"wait": "yes"}', ["wait"]),
    ("/abort_requests", b'{"timeout_s": -1}', ["timeout_s"]),
    ("/abort_requests", b'{"rid": "job-1"}', ["rid", "unknown field"]),
    ("/abort_requests", b'{"abort_all": true}', ["abort_all", "unknown field"]),
    ("/update_weight_version", b"{}", ["new_version", "required"]),
    ("/update_weight_version", b'{"new_version": 7}', ["new_version"]),
    ("/update_weight_version", b'{"new_version": ""}', ["new_version"]),
    ("/update_weight_version", b'{"new_version": "v", "abort_all_requests": "no"}', ["abort_all_requests"]),
    ("/partial_generate", b"", ["input_ids", "required"]),
    ("/partial_generate", b'{"input_ids": []}', ["input_ids"]),
    ("/partial_generate", b'{"input_ids": "hello"}', ["input_ids"]),
    ("/partial_generate", b'{"input_ids": [1, -3]}', ["input_ids", ">= 0"]),
    ("/partial_generate", b'{"input_ids": [1], "sampling_params": {"max_new_tokens": 0}}', ["max_new_tokens"]),
    ("/partial_generate", b'{"input_ids": [1], "sampling_params": {"max_new_tokens": "8"}}', ["max_new_tokens"]),
    ("/partial_generate", b'{"input_ids": [1], "sampling_params": {"temperature": -1}}', ["temperature"]),
    ("/partial_generate", b'{"input_ids": [1], "sampling_params": {"top_p": 0}}', ["top_p"]),
    ("/partial_generate", b'{"input_ids": [1], "sampling_params": {"max_tokens": 8}}', ["max_tokens", "unknown field"]),
    ("/partial_generate", b'{"input_ids": [1], "request_id": 5}', ["request_id"]),
    ("/pause", b'{"mode": "retract"}', ["mode"]),
    ("/pause", b'{"mode": 1}', ["mode"]),
]

LONG_NAME = "n" * (MAX_NAME_CHARS + 1)
# One past each bound of the contract (schema.py), the same on every engine; the message names
# the field and the bound.
PAST_THE_BOUNDS = [
    ("/partial_generate", {"input_ids": [1], "sampling_params": {"top_k": INT32_MAX + 1}}, ["sampling_params.top_k", str(INT32_MAX)]),
    ("/partial_generate", {"input_ids": [1], "sampling_params": {"top_k": 0}}, ["sampling_params.top_k", "-1"]),
    ("/partial_generate", {"input_ids": [1], "sampling_params": {"seed": 2**70}}, ["sampling_params.seed", str(INT32_MAX)]),
    ("/partial_generate", {"input_ids": [1], "sampling_params": {"seed": -1}}, ["sampling_params.seed", "0"]),
    ("/partial_generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": INT32_MAX + 1}}, ["sampling_params.max_new_tokens", str(INT32_MAX)]),
    ("/partial_generate", {"input_ids": [1], "sampling_params": {"temperature": 2.5}}, ["sampling_params.temperature", "2"]),
    ("/partial_generate", {"input_ids": [1, INT32_MAX + 1]}, ["input_ids[1]", str(INT32_MAX)]),
    ("/partial_generate", {"input_ids": [1], "sampling_params": {"stop_token_ids": [2**40]}}, ["sampling_params.stop_token_ids[0]", str(INT32_MAX)]),
    ("/partial_generate", {"input_ids": [1], "max_staleness": INT32_MAX + 1}, ["max_staleness", str(INT32_MAX)]),
    ("/partial_generate", {"input_ids": [1], "request_id": LONG_NAME}, ["request_id", str(MAX_NAME_CHARS)]),
    ("/abort_requests", {"max_staleness": INT32_MAX + 1}, ["max_staleness", str(INT32_MAX)]),
    ("/abort_requests", {"timeout_s": 3601}, ["timeout_s", "3600"]),
    ("/abort_requests", {"timeout_s": 1e308}, ["timeout_s", "3600"]),
    ("/abort_requests", {"admitted_before": LONG_NAME}, ["admitted_before", str(MAX_NAME_CHARS)]),
    ("/abort_requests", {"request_ids": ["a", LONG_NAME]}, ["request_ids.1", str(MAX_NAME_CHARS)]),
    ("/update_weight_version", {"new_version": LONG_NAME}, ["new_version", str(MAX_NAME_CHARS)]),
]
BAD_INPUTS += [(path, json.dumps(body).encode(), words) for path, body, words in PAST_THE_BOUNDS]
# More digits than Python turns into an int (4,300): a ValueError inside json.loads.
BAD_INPUTS.append(
    ("/partial_generate", b'{"input_ids": [1], "sampling_params": {"seed": 1' + b"0" * 5_000 + b"}}", ["malformed JSON", "digits"])
)


async def test_every_bad_input_is_a_400_naming_the_problem_and_harms_no_request(target):
    async with Api(target) as api:
        [survivor] = api.start(1, 600, prefix="survivor")
        await api.wait_in_flight(1)
        for path, raw, words in BAD_INPUTS:
            response = await api.http.post(path, content=raw, headers={"Content-Type": "application/json"})
            assert response.status_code == 400, f"{path} {raw!r} -> {response.status_code} {response.text}"
            error = response.json()["error"]
            assert error["type"] == error_type(target, path) and error["code"] == 400, error
            for word in words:
                assert word in error["message"], f"{path} {raw!r}: {word!r} not in {error['message']!r}"
        bad_query = await api.http.post("/pause", params={"mode": "retract"})
        assert bad_query.status_code == 400 and "mode" in bad_query.json()["error"]["message"]
        assert (await api.ok("GET", "/is_paused"))["is_paused"] is False
        result = await survivor
        assert (await api.loads())["in_flight"] == 0
    assert result["finish_reason"] == "length" and len(result["output_ids"]) == 600
    assert_partial(result, 600)


# Values that reached the engines before they were bounded: top_k = 2**31 killed SGLang's
# scheduler (an int32 tensor), seed = 2**70 and a 5,000-digit integer were 500s on vLLM, a
# million-character version name became a metric label.
ENGINE_KILLERS = [
    ("/partial_generate", {"input_ids": [1, 2, 3], "sampling_params": {"top_k": 2**31}}, ["sampling_params.top_k", str(INT32_MAX)]),
    ("/partial_generate", {"input_ids": [1, 2, 3], "sampling_params": {"seed": 2**70}}, ["sampling_params.seed", str(INT32_MAX)]),
    ("/partial_generate", b'{"input_ids": [1, 2, 3], "sampling_params": {"seed": 1' + b"0" * 5_000 + b"}}", ["malformed JSON", "digits"]),
    ("/update_weight_version", {"new_version": "v" * 1_000_000}, ["new_version", str(MAX_NAME_CHARS)]),
]


@pytest.mark.parametrize("path, body, words", ENGINE_KILLERS, ids=["top_k", "seed", "5000-digits", "long-version"])
async def test_values_past_an_engines_bounds_are_a_400_and_the_engine_serves_the_next_request(target, path, body, words):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with Api(target) as api:
        version = (await api.loads())["weight_version"]
        response = await api.http.post(path, content=raw, headers={"Content-Type": "application/json"})
        what = f"{path} {raw[:80]!r} -> {response.status_code} {response.text[:300]}"
        # The next normal request is served (on SGLang, top_k = 2**31 had killed the scheduler).
        after = await api.generate(8)
        loads = await api.loads()
    assert response.status_code == 400, what
    message = response.json()["error"]["message"]
    for word in words:
        assert word in message, what
    assert len(message) < 1_000, what  # the refused value is not echoed whole
    assert after["finish_reason"] == "length" and len(after["output_ids"]) == 8
    assert loads["in_flight"] == 0 and loads["weight_version"] == version


async def test_values_at_the_bounds_are_served(target):
    # The largest value each bound lets through is one the engine takes (top_k past the
    # vocabulary means every token, on both engines).
    sampling = {"top_k": INT32_MAX, "temperature": 2.0, "max_new_tokens": 8, "ignore_eos": True}
    if target.honours_seed:
        sampling["seed"] = INT32_MAX
    name = "n" * MAX_NAME_CHARS
    async with Api(target) as api:
        result = await api.ok("POST", "/partial_generate", {"input_ids": [1, 15, 27], "request_id": name, "max_staleness": INT32_MAX, "sampling_params": sampling})
        aborted = await api.ok("POST", "/abort_requests", {"request_ids": [name], "wait": True, "timeout_s": 3600})
        stale = await api.ok("POST", "/abort_requests", {"max_staleness": INT32_MAX})
        bumped = await api.ok("POST", "/update_weight_version", {"new_version": name})
        await api.ok("POST", "/update_weight_version", {"new_version": "after-bounds"})
    assert result["request_id"] == name and result["finish_reason"] == "length" and len(result["output_ids"]) == 8
    assert_partial(result, 8)
    assert aborted["aborted"] == 0 and stale["aborted"] == 0
    assert bumped["new_version"] == name


async def test_bad_input_does_not_stop_the_engine_serving_concurrent_requests(target):
    async with Api(target) as api:
        good = [api.generate(16) for _ in range(4)]
        bad = [api.http.post("/partial_generate", content=b"{", headers={"Content-Type": "application/json"}) for _ in range(8)]
        results = await asyncio.gather(*good, *bad)
    assert all(r["finish_reason"] == "length" for r in results[:4])
    assert all(r.status_code == 400 for r in results[4:])


# Values the schema accepts but the served model cannot take: (body, words the message must contain).
# The ids and lengths are far past any tiny model's vocabulary (a few hundred) and context (2,048).
BEYOND_THE_MODEL = [
    ({"input_ids": [1, 10**6]}, ["input_ids[1]", "1000000", "vocabulary"]),
    ({"input_ids": [1], "sampling_params": {"stop_token_ids": [2, 10**6]}}, ["stop_token_ids[1]", "vocabulary"]),
    ({"input_ids": [1] * 100_000}, ["input_ids", "100000 tokens", "context length"]),
    ({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 10**7}}, ["max_new_tokens", "10000000", "context length"]),
]


async def test_values_the_model_cannot_take_are_a_400_naming_the_limit_and_harm_no_request(target):
    async with Api(target) as api:
        [survivor] = api.start(1, 600, prefix="model-survivor")
        await api.wait_in_flight(1)
        for body, words in BEYOND_THE_MODEL:
            response = await api.http.post("/partial_generate", json=body)
            assert response.status_code == 400, f"{str(body)[:80]} -> {response.status_code} {response.text[:300]}"
            error = response.json()["error"]
            assert error["type"] == error_type(target, "/partial_generate") and error["code"] == 400, error
            for word in words:
                assert word in error["message"], f"{str(body)[:80]}: {word!r} not in {error['message']!r}"
        # The engine still serves: the survivor ran to its end and a new request generates.
        result = await survivor
        after = await api.generate(8)
        assert (await api.loads())["in_flight"] == 0
    assert result["finish_reason"] == "length" and len(result["output_ids"]) == 600
    assert after["finish_reason"] == "length" and len(after["output_ids"]) == 8


async def test_a_body_or_an_id_list_past_its_bound_is_refused_naming_the_limit(target):
    async with Api(target) as api:
        [survivor] = api.start(1, 600, prefix="bounds-survivor")
        await api.wait_in_flight(1)
        huge = b"{" + b" " * (16 * 1024 * 1024) + b"}"  # 16 MiB and 2 bytes: valid JSON, one past the default limit
        too_large = await api.http.post("/abort_requests", content=huge, headers={"Content-Type": "application/json"})
        many = await api.post("/abort_requests", {"request_ids": [f"id-{i}" for i in range(100_001)]})
        result = await survivor
    assert too_large.status_code == 413, too_large.text
    message = too_large.json()["error"]["message"]
    assert "16777216 bytes" in message and "ENGINE_PLUGINS_MAX_BODY_BYTES" in message
    assert many.status_code == 400 and "request_ids" in many.text and "100000" in many.text, many.text[:300]
    assert result["finish_reason"] == "length" and len(result["output_ids"]) == 600
