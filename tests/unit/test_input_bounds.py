"""Every number and string a request carries is bounded, the same on every engine; bodies are read
as a stream and refused once past their limit; big bodies are parsed off the event loop; a 500
never carries an exception's text (issue 23)."""

from __future__ import annotations

import json
import threading
from typing import Any, AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from hook_app import stub_app
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from starlette.requests import Request

from engine_plugins.host.config import Settings
from engine_plugins.host.dispatch import Hooks
from engine_plugins.contract.errors import ContractError
from engine_plugins.host.http_api import (
    THREADED_PARSE_BYTES,
    ContractRoute,
    build_routes,
    parse_body,
)
from engine_plugins.host.operations import describe_validation_error
from engine_plugins.contract.schema import (
    INT32_MAX,
    MAX_NAME_CHARS,
    MAX_TIMEOUT_S,
    AbortRequest,
    PartialGenerateRequest,
    UpdateWeightVersionRequest,
)
from engine_plugins.engines.sglang.native_routes import NativeAbortRequest, NativePauseRequest

pytestmark = pytest.mark.anyio

NAME = "n" * MAX_NAME_CHARS


def generate(**fields: Any) -> dict:
    """A /partial_generate body with *fields*, sampling fields given as ``sp_<name>``."""
    sampling = {k[3:]: v for k, v in fields.items() if k.startswith("sp_")}
    body = {"input_ids": [1, 2, 3], "sampling_params": sampling}
    body.update({k: v for k, v in fields.items() if not k.startswith("sp_")})
    return body


# (model, body at the bound: accepted, body one past it: refused, words the refusal must contain)
BOUNDS = [
    (PartialGenerateRequest, generate(sp_top_k=INT32_MAX), generate(sp_top_k=INT32_MAX + 1), ["sampling_params.top_k", str(INT32_MAX)]),
    (PartialGenerateRequest, generate(sp_top_k=-1), generate(sp_top_k=0), ["sampling_params.top_k", "-1", str(INT32_MAX)]),
    (PartialGenerateRequest, generate(sp_top_k=1), generate(sp_top_k=-2), ["sampling_params.top_k", "-1"]),
    (PartialGenerateRequest, generate(sp_seed=INT32_MAX), generate(sp_seed=2**70), ["sampling_params.seed", str(INT32_MAX)]),
    (PartialGenerateRequest, generate(sp_seed=0), generate(sp_seed=-1), ["sampling_params.seed", "0"]),
    (PartialGenerateRequest, generate(sp_max_new_tokens=INT32_MAX), generate(sp_max_new_tokens=INT32_MAX + 1), ["sampling_params.max_new_tokens", str(INT32_MAX)]),
    (PartialGenerateRequest, generate(sp_temperature=2.0), generate(sp_temperature=2.5), ["sampling_params.temperature", "2"]),
    (PartialGenerateRequest, generate(input_ids=[0, INT32_MAX]), generate(input_ids=[0, INT32_MAX + 1]), ["input_ids[1]", str(INT32_MAX)]),
    (PartialGenerateRequest, generate(input_ids=[0, 1]), generate(input_ids=[0, -1]), ["input_ids[1]", ">= 0"]),
    (PartialGenerateRequest, generate(sp_stop_token_ids=[INT32_MAX]), generate(sp_stop_token_ids=[5, 2**40]), ["sampling_params.stop_token_ids[1]", str(INT32_MAX)]),
    (PartialGenerateRequest, generate(max_staleness=INT32_MAX), generate(max_staleness=INT32_MAX + 1), ["max_staleness", str(INT32_MAX)]),
    (PartialGenerateRequest, generate(request_id=NAME), generate(request_id=NAME + "n"), ["request_id", str(MAX_NAME_CHARS)]),
    (AbortRequest, {"max_staleness": INT32_MAX}, {"max_staleness": INT32_MAX + 1}, ["max_staleness", str(INT32_MAX)]),
    (AbortRequest, {"timeout_s": MAX_TIMEOUT_S}, {"timeout_s": MAX_TIMEOUT_S + 1}, ["timeout_s", "3600"]),
    (AbortRequest, {"timeout_s": MAX_TIMEOUT_S}, {"timeout_s": 1e308}, ["timeout_s", "3600"]),
    (AbortRequest, {"admitted_before": NAME}, {"admitted_before": NAME + "n"}, ["admitted_before", str(MAX_NAME_CHARS)]),
    (AbortRequest, {"request_ids": [NAME]}, {"request_ids": ["a", NAME + "n"]}, ["request_ids.1", str(MAX_NAME_CHARS)]),
    (UpdateWeightVersionRequest, {"new_version": NAME}, {"new_version": "v" * 1_000_000}, ["new_version", str(MAX_NAME_CHARS)]),
    (NativeAbortRequest, {"rid": NAME}, {"rid": NAME + "n"}, ["rid", str(MAX_NAME_CHARS)]),
    (NativePauseRequest, {"mode": "in_place"}, {"mode": "x" * 1_000_000}, ["mode", "16"]),
]


@pytest.mark.parametrize("model, at, past, words", BOUNDS, ids=[f"{m.__name__}-{'-'.join(w[:1])}-{i}" for i, (m, _, _, w) in enumerate(BOUNDS)])
def test_a_value_at_its_bound_is_taken_and_one_past_it_is_refused_naming_field_and_bound(model, at, past, words):
    model.model_validate(at)
    with pytest.raises(ValidationError) as refused:
        model.model_validate(past)
    message = describe_validation_error(refused.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    # A refused value is echoed cut short, never whole.
    assert len(message) < 400, message


def test_a_list_of_a_million_bad_values_is_one_short_message():
    with pytest.raises(ValidationError) as refused:
        PartialGenerateRequest.model_validate({"input_ids": ["x"] * 1_000_000})
    message = describe_validation_error(refused.value)
    assert message.startswith("input_ids.0: Input should be a valid integer")
    assert "and 999990 more problems" in message and len(message) < 2_000, message[:300]


# --- over HTTP, through the stub's routes ---------------------------------------------------


async def test_an_integer_too_long_for_python_to_read_is_a_400_naming_the_problem():
    # Python refuses to turn more than 4,300 digits into an int: a ValueError inside json.loads,
    # which was a 500 with the exception's text.
    raw = b'{"input_ids": [1], "sampling_params": {"seed": 1' + b"0" * 5_000 + b"}}"
    async with stub_app() as stub:
        response = await stub.http.post("/partial_generate", content=raw, headers={"Content-Type": "application/json"})
        after = await stub.ok("partial_generate")
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["type"] == "invalid_request"
    assert "malformed JSON body" in error["message"] and "4300 digits" in error["message"] and str(INT32_MAX) in error["message"]
    assert "set_int_max_str_digits" not in error["message"]
    assert after["finish_reason"] == "length"


async def test_a_chunked_body_past_the_limit_is_refused_before_the_rest_is_read():
    # A body without Content-Length (chunked) was read whole before its size was checked: 150
    # MiB took the server from 49 MB to 357 MB before its 413. Now reading stops past the limit.
    chunk, limit, sent = 64 * 1024, 256 * 1024, []

    async def body() -> AsyncIterator[bytes]:
        for i in range(200):  # 12.5 MiB in all
            sent.append(i)
            yield b" " * chunk

    async with stub_app(settings=Settings(plugins=frozenset(), max_body_bytes=limit)) as stub:
        response = await stub.http.post("/abort_requests", content=body(), headers={"Content-Type": "application/json"})
        after = await stub.ok("partial_generate")
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["type"] == "request_too_large"
    assert f"{limit} bytes" in error["message"] and "ENGINE_PLUGINS_MAX_BODY_BYTES" in error["message"]
    # The transport hands the app one chunk per receive(): it read just past the limit.
    assert len(sent) <= limit // chunk + 2, f"{len(sent)} chunks of {chunk} bytes read for a limit of {limit}"
    assert after["finish_reason"] == "length"


async def test_a_body_within_the_limit_is_read_whole_and_still_readable_by_a_hook():
    seen = []

    class Reader:
        from engine_plugins import hookimpl

        @hookimpl(tryfirst=True)
        async def update_weight_version(self, http_request):
            # A plugin that reads the raw body after the route parsed it still gets it.
            seen.append(await http_request.body())

    async def pieces() -> AsyncIterator[bytes]:
        yield b'{"new_version": '
        yield b'"v9"}'

    async with stub_app({"reader": Reader()}) as stub:
        response = await stub.http.post("/update_weight_version", content=pieces(), headers={"Content-Type": "application/json"})
    assert response.status_code == 200 and response.json()["new_version"] == "v9", response.text
    assert seen == [b'{"new_version": "v9"}']


class _Threads(BaseModel):
    """A request model that records the thread it is validated on."""

    model_config = ConfigDict(extra="allow")
    seen: list = []

    @model_validator(mode="before")
    @classmethod
    def _record(cls, data: Any) -> Any:
        _Threads.seen.append(threading.get_ident())
        return data


def _request(raw: bytes) -> Request:
    chunks = [raw[i : i + 65536] for i in range(0, len(raw), 65536)] or [b""]
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive() -> dict:
        return messages.pop(0)

    return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)


async def test_a_big_body_is_parsed_off_the_event_loop_and_a_small_one_on_it():
    loop_thread = threading.get_ident()
    _Threads.seen = []
    small = json.dumps({"ids": [1] * 10}).encode()
    big = json.dumps({"ids": [1] * (THREADED_PARSE_BYTES // 3 + 10)}).encode()
    assert len(big) > THREADED_PARSE_BYTES
    await parse_body(_request(small), _Threads, 64 * 1024 * 1024)
    await parse_body(_request(big), _Threads, 64 * 1024 * 1024)
    assert _Threads.seen[0] == loop_thread
    assert _Threads.seen[1] != loop_thread


async def test_a_bad_big_body_is_still_a_400():
    big = b'{"input_ids": [' + b"1, " * (THREADED_PARSE_BYTES // 3) + b'"x"]}'
    with pytest.raises(ContractError) as refused:
        await parse_body(_request(big), PartialGenerateRequest, 64 * 1024 * 1024)
    assert refused.value.status == 400 and "input_ids" in refused.value.message


# --- 500 answers ----------------------------------------------------------------------------


async def test_an_unexpected_failure_is_a_500_without_the_exceptions_text(caplog):
    async def fails(ctx, request):
        raise RuntimeError("secret-detail /home/someone/token=abc")

    app = FastAPI()
    app.include_router(build_routes(Hooks(None, lambda: None), Settings(plugins=frozenset()), [ContractRoute("/fails", "POST", fails)]))
    with caplog.at_level("ERROR", logger="engine_plugins.host.http_api"):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            response = await http.post("/fails")
    assert response.status_code == 500
    assert response.json() == {"error": {"message": "internal error; the server log has the details", "type": "internal_error", "param": None,
                                          "code": 500}}
    (record,) = [r for r in caplog.records if r.name == "engine_plugins.host.http_api"]
    assert record.exc_info[0] is RuntimeError and "secret-detail" in str(record.exc_info[1])
