"""Property-based fuzzing of every contract route while generations run (issue 12).

Hypothesis builds request bodies from the request models' fields (:mod:`engine_plugins.contract.schema`)
and far beyond them: valid values, wrong types, out-of-range and huge integers, NaN-like strings
and JSON's NaN/Infinity, unknown fields, nested junk, lists of thousands of elements, very long
strings (lone surrogates included), bodies that are not JSON, not objects, truncated or empty,
and query strings for ``/pause``. Every bound of the contract (:mod:`engine_plugins.contract.schema`: the
int32 maximum, the 256-character names, ``timeout_s`` and ``temperature`` maxima) is tried at
and just past itself, and integers of more digits than Python reads. Each example is sent while a chain of long "survivor"
generations runs in a background thread. Properties:

- every answer is below 500; a refusal is a 4xx with the contract's JSON error body, an
  acceptance fits the route's answer model;
- no request hangs (a client timeout fails the example);
- every survivor finishes with ``finish_reason == "length"`` and all its tokens, nothing stays
  in flight, and the server still serves a fresh generation.

The few *valid* bodies that would legitimately cut the survivors (an abort of everything or by
age, a pause, a bump with ``abort_all_requests``) are not sent: the test decides what the server
would accept the way the server does (``json.loads`` then the strict request model). Valid
``/partial_generate`` bodies are sent, with ``max_new_tokens`` capped at 8 unless it is far past
any target's context (then the model check must refuse it), so that they finish quickly.

Schemathesis is not used: the plugin's routes read their own bodies (``Request``), so the
engines' OpenAPI documents carry no request schemas to derive cases from.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any, Optional

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from engine_plugins.contract.schema import (
    INT32_MAX,
    MAX_NAME_CHARS,
    MAX_TEMPERATURE,
    MAX_TIMEOUT_S,
    AbortRequest,
    ErrorBody,
    PartialGenerateRequest,
    PauseRequest,
    SamplingParams,
    UpdateWeightVersionRequest,
)
from tiers import rounds

from .api import ANSWERS, DEADLINE_S, assert_partial, contract_headers

# Enough to cover every strategy branch many times on the fast targets; the real engines take
# seconds per valid generation on two cores, so fewer there keeps a run under ~2 minutes.
EXAMPLES = {"real": 60, "fast": 300}
SURVIVOR_PREFIX = "fuzz-survivor"
# No contract call may take longer than this: a hang fails the example, it never stalls the suite.
REQUEST_TIMEOUT_S = 30.0
# Far past the 2,048-token context of every target's model: the model check refuses these.
BEYOND_CONTEXT = 100_000
# Valid generations are kept short so that the fuzz spends its time on inputs, not on decoding.
SHORT_GENERATION = 8

# --- values --------------------------------------------------------------------------------

HUGE_INTS = st.sampled_from([2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 2**70, 10**30, 10**400, -(2**63) - 1, -(10**30)])
# Each integer bound of the contract, at and just past it (int32 for every integer field).
INT_BOUNDS = st.sampled_from([INT32_MAX - 1, INT32_MAX, INT32_MAX + 1, -1, 0, 1, -(2**31) - 1])
INTS = st.one_of(st.integers(-5, 600), st.integers(), HUGE_INTS, INT_BOUNDS)
FLOAT_BOUNDS = st.sampled_from([MAX_TEMPERATURE, MAX_TEMPERATURE + 1e-9, MAX_TIMEOUT_S, MAX_TIMEOUT_S + 1e-6, float(INT32_MAX + 1)])
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1e-300, 1e308, -1.0]), FLOAT_BOUNDS)
NAN_LIKE = st.sampled_from(["NaN", "nan", "Infinity", "-Infinity", "inf", "1e309", "-0", "0x10", "1_000", " 1", "", "null", "true"])
# Long strings are built, not drawn character by character, so that 100k characters cost nothing.
LONG_STRINGS = st.builds(lambda c, n: c * n, st.sampled_from(["a", "é", "\x00", "💥", "/", "%"]), st.integers(1_000, 100_000))
# Lone surrogates survive json.loads but not a later UTF-8 encode: a classic path to a 500.
SURROGATES = st.sampled_from(["\ud800", "a\udfffb", "\udc80" * 3])
# Names (versions, request ids) at and just past their 256-character bound, and far past it.
NAME_BOUNDS = st.builds(lambda c, n: c * n, st.sampled_from(["v", "é", "💥"]), st.sampled_from([MAX_NAME_CHARS, MAX_NAME_CHARS + 1, 1_000_000]))
TEXT = st.one_of(st.text(max_size=30), NAN_LIKE, LONG_STRINGS, SURROGATES, NAME_BOUNDS)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
JUNK = st.recursive(
    SCALARS,
    lambda kids: st.one_of(st.lists(kids, max_size=5), st.dictionaries(st.text(max_size=10), kids, max_size=5)),
    max_leaves=20,
)
# Lists of thousands of one value: big bodies without a big Hypothesis draw. The value is short:
# thousands of a million-character name are gigabytes of JSON in the test process (one draw of
# NAME_BOUNDS' longest once ran it out of memory).
SHORT_SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, st.text(max_size=30), NAN_LIKE, SURROGATES)
BIG_LISTS = st.builds(lambda v, n: [v] * n, SHORT_SCALARS, st.integers(0, 4_000))

TOKEN_IDS = st.one_of(
    st.lists(st.integers(0, 511), min_size=1, max_size=20),
    st.builds(lambda ids, bound: ids + [bound], st.lists(st.integers(0, 511), max_size=3), INT_BOUNDS),
    st.lists(INTS, max_size=10),
    st.builds(lambda t, n: [t] * n, st.integers(0, 600), st.integers(0, 4_000)),
    BIG_LISTS,
    JUNK,
)
IDS = st.one_of(st.text(min_size=1, max_size=20), TEXT, NAME_BOUNDS)
ID_LISTS = st.one_of(
    st.lists(IDS, max_size=5),
    st.builds(lambda n: [f"fuzz-unknown-{i}" for i in range(n)], st.integers(0, 4_000)),
    BIG_LISTS,
    JUNK,
)
BOOLS = st.one_of(st.booleans(), JUNK)
TIMEOUTS = st.one_of(st.floats(0.001, 5), FLOATS, FLOAT_BOUNDS, INTS, NAN_LIKE, JUNK)
STALENESS = st.one_of(st.integers(-2, 5), INT_BOUNDS, INTS, JUNK)


def with_unknown_fields(objects: st.SearchStrategy[dict], known: set[str]) -> st.SearchStrategy[dict]:
    """*objects*, or *objects* with a few fields the model does not have."""
    extra = st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda k: k not in known), JUNK, min_size=1, max_size=3)
    return st.one_of(objects, objects, st.builds(lambda o, e: {**o, **e}, objects, extra))


def model_objects(fields: dict[str, st.SearchStrategy], model: type[BaseModel]) -> st.SearchStrategy[dict]:
    """JSON objects with any subset of the model's fields, each drawn from its strategy."""
    return with_unknown_fields(st.fixed_dictionaries({}, optional=fields), set(model.model_fields))


SAMPLING = model_objects(
    {
        "max_new_tokens": st.one_of(st.integers(1, SHORT_GENERATION), st.integers(BEYOND_CONTEXT, 10**30), INT_BOUNDS, INTS, JUNK),
        "temperature": st.one_of(st.floats(0, 2), FLOATS, FLOAT_BOUNDS, NAN_LIKE, JUNK),
        "top_p": st.one_of(st.floats(0.01, 1), FLOATS, NAN_LIKE, JUNK),
        "top_k": st.one_of(st.integers(-1, 600), INT_BOUNDS, INTS, JUNK),
        "stop_token_ids": st.one_of(st.lists(st.integers(0, 511), max_size=5), TOKEN_IDS),
        "ignore_eos": BOOLS,
        "seed": st.one_of(st.none(), INT_BOUNDS, INTS, JUNK),
    },
    SamplingParams,
)

OBJECTS: dict[str, st.SearchStrategy[dict]] = {
    "/abort_requests": model_objects(
        {
            "request_ids": ID_LISTS,
            "admitted_before": st.one_of(IDS, JUNK),
            "max_staleness": STALENESS,
            "wait": BOOLS,
            "timeout_s": TIMEOUTS,
        },
        AbortRequest,
    ),
    "/update_weight_version": model_objects(
        {"new_version": st.one_of(IDS, JUNK), "abort_all_requests": st.one_of(st.none(), BOOLS)},
        UpdateWeightVersionRequest,
    ),
    "/partial_generate": model_objects(
        {
            "input_ids": TOKEN_IDS,
            "sampling_params": st.one_of(SAMPLING, SAMPLING, JUNK),
            "request_id": st.one_of(st.none(), IDS, JUNK),
            "max_staleness": st.one_of(st.none(), STALENESS),
        },
        PartialGenerateRequest,
    ),
    "/pause": model_objects({"mode": st.one_of(st.sampled_from(["abort", "keep", "retract", "in_place", "ABORT", ""]), JUNK)}, PauseRequest),
    # /resume reads no body; it gets the same junk as everyone.
    "/resume": JUNK.filter(lambda v: isinstance(v, dict)) | st.just({}),
}

RAW_BODIES = st.sampled_from(
    [
        b"",
        b" ",
        b"\n\t",
        b"{",
        b"}",
        b"null",
        b"[]",
        b"{}",
        b'{"a":',
        b"\xff\xfe\x00",
        b"\x00" * 64,
        b'{"request_ids": [' + b'"x",' * 2_000 + b'"x"]}',
        b'{"input_ids": [1, 2',
        b"NaN",
        b'{"wait": NaN}',
        b'{"timeout_s": Infinity}',
        b'{"input_ids": [1], "input_ids": [2]}',
        b"\xef\xbb\xbf{}",
        "{}".encode("utf-16"),
        # More digits than Python turns into an int (a ValueError inside json.loads).
        b'{"input_ids": [1' + b"0" * 5_000 + b"]}",
        b'{"input_ids": [1], "sampling_params": {"seed": -' + b"9" * 4_301 + b"}}",
        b'{"max_staleness": ' + b"7" * 10_000 + b"}",
    ]
)

# JSON nested deeper than Python's recursion limit: json.loads raises RecursionError (the fuzz
# found it answered with a 500). Sent by their own test below, which needs no survivor.
DEEP_NESTING = [b"[" * 5_000 + b"]" * 5_000, b'{"a":' * 5_000 + b"1" + b"}" * 5_000]


def json_bytes(value: Any, ascii_only: bool) -> bytes:
    """*value* as JSON; with ``ascii_only=False`` lone surrogates become invalid UTF-8 bytes."""
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def bodies(objects: st.SearchStrategy[dict]) -> st.SearchStrategy[Optional[bytes]]:
    """Encodings of *objects* and of everything else a client might send instead."""
    encoded = st.builds(json_bytes, objects, st.booleans())
    return st.one_of(
        encoded,
        encoded,
        encoded,
        st.builds(json_bytes, JUNK, st.booleans()),  # JSON, but mostly not an object
        st.binary(max_size=200),  # not JSON at all
        RAW_BODIES,
        encoded.map(lambda b: b[: max(1, len(b) // 2)]),  # truncated
        encoded.map(lambda b: b + b" trailing"),
        st.none(),  # no body at all
    )


SAFE_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
PAUSE_QUERIES = st.lists(
    st.tuples(
        st.sampled_from(["mode", "mode", "MODE", "mode[]", "x"]),
        st.one_of(st.sampled_from(["abort", "keep", "", "Abort", "retract", "in_place", "abort,keep"]), SAFE_TEXT, st.just("k" * 1_500)),
    ),
    max_size=3,
)
OTHER_QUERIES = st.lists(st.tuples(SAFE_TEXT, SAFE_TEXT), max_size=3)
CONTENT_TYPES = st.sampled_from([None, "application/json", "application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])


class Example:
    """One request the fuzz sends. Not a dataclass: Hypothesis reports a failing example with
    this short repr instead of pretty-printing a 100k-character body."""

    def __init__(self, method: str, path: str, content: Optional[bytes], params: list[tuple[str, str]], content_type: Optional[str]) -> None:
        self.method, self.path, self.content, self.params, self.content_type = method, path, content, params, content_type

    def __repr__(self) -> str:  # the shrunk example in a failure report, without 100k-char bodies
        body = None if self.content is None else (self.content[:300] + (b"..." if len(self.content) > 300 else b""))
        return f"Example({self.method} {self.path} params={str(self.params)[:200]} content_type={self.content_type} body={body!r} ({0 if self.content is None else len(self.content)} bytes))"


def posts(path: str, queries: st.SearchStrategy) -> st.SearchStrategy[Example]:
    return st.builds(Example, st.just("POST"), st.just(path), bodies(OBJECTS[path]), queries, CONTENT_TYPES)


def bound_probes() -> list[Example]:
    """A valid body per route with one field set at its bound, or just past it (and far past)."""
    name, generate = "v" * MAX_NAME_CHARS, {"input_ids": [1, 15, 27], "sampling_params": {"max_new_tokens": SHORT_GENERATION}}
    fields = [
        ("/partial_generate", generate, ("sampling_params", "top_k"), [INT32_MAX, INT32_MAX + 1, 2**31 + 5, -1, 0, -2]),
        ("/partial_generate", generate, ("sampling_params", "seed"), [0, INT32_MAX, INT32_MAX + 1, 2**70, -1]),
        ("/partial_generate", generate, ("sampling_params", "max_new_tokens"), [INT32_MAX, INT32_MAX + 1]),
        ("/partial_generate", generate, ("sampling_params", "temperature"), [MAX_TEMPERATURE, MAX_TEMPERATURE + 1e-9]),
        ("/partial_generate", generate, ("sampling_params", "stop_token_ids"), [[INT32_MAX], [5, INT32_MAX + 1]]),
        ("/partial_generate", generate, ("input_ids",), [[1, INT32_MAX], [1, INT32_MAX + 1], [1, -1]]),
        ("/partial_generate", generate, ("max_staleness",), [INT32_MAX, INT32_MAX + 1]),
        ("/partial_generate", generate, ("request_id",), [name, name + "v", name * 4_000]),
        ("/abort_requests", {"request_ids": ["fuzz-unknown"], "wait": True}, ("timeout_s",), [MAX_TIMEOUT_S, MAX_TIMEOUT_S + 1e-6, 1e308]),
        ("/abort_requests", {}, ("request_ids",), [[name], ["a", name + "v"]]),
        ("/abort_requests", {}, ("max_staleness",), [INT32_MAX + 1, 2**70]),
        ("/abort_requests", {}, ("admitted_before",), [name + "v"]),
        ("/update_weight_version", {}, ("new_version",), [name, name + "v", name * 4_000]),
    ]
    probes = []
    for path, base, where, values in fields:
        for value in values:
            body = json.loads(json.dumps(base))
            *parents, last = where
            inner = body
            for key in parents:
                inner = inner.setdefault(key, {})
            inner[last] = value
            probes.append(Example("POST", path, json_bytes(body, ascii_only=True), [], "application/json"))
    return probes


EXAMPLES_STRATEGY = st.one_of(
    st.sampled_from(bound_probes()),
    posts("/abort_requests", OTHER_QUERIES),
    posts("/update_weight_version", OTHER_QUERIES),
    posts("/partial_generate", OTHER_QUERIES),
    posts("/partial_generate", OTHER_QUERIES),
    posts("/pause", PAUSE_QUERIES),
    posts("/resume", OTHER_QUERIES),
    # GETs with query junk, and sometimes a body they must ignore.
    st.builds(Example, st.just("GET"), st.sampled_from(["/v1/loads", "/is_paused"]), st.one_of(st.none(), RAW_BODIES), OTHER_QUERIES, CONTENT_TYPES),
)

# --- what the server would do --------------------------------------------------------------


def accepted(model: type[BaseModel], content: Optional[bytes]) -> Optional[BaseModel]:
    """The request *model* the server would read from *content*, or None if it refuses it.

    Mirrors the routes' own parsing: an empty body is ``{}``, then ``json.loads`` and the strict
    model. Errors this cannot foresee only make the server refuse more, never accept more.
    """
    raw = content or b""
    data: Any = {}
    if raw.strip():
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
    if not isinstance(data, dict):
        return None
    try:
        return model.model_validate(data)
    except (ValidationError, RecursionError):
        return None


def would_cut_survivors(example: Example) -> bool:
    """Whether the server may accept *example* as an abort of the survivors, a pause, or a bump
    that aborts everything: those are correct behaviour, not what this fuzz looks for."""
    if example.path == "/abort_requests":
        body = accepted(AbortRequest, example.content)
        if body is None:
            return False
        # Only an abort by exact ids, none of them a survivor's, leaves the survivors alone.
        return not (body.request_ids and not any(str(i).startswith(SURVIVOR_PREFIX) for i in body.request_ids))
    if example.path == "/pause":
        if accepted(PauseRequest, example.content) is None:
            return False
        modes = [v for k, v in example.params if k == "mode"]
        # A valid query mode may be accepted (or refused as conflicting): counted as a pause.
        return not modes or any(m in ("abort", "keep") for m in modes)
    if example.path == "/update_weight_version":
        body = accepted(UpdateWeightVersionRequest, example.content)
        return body is not None and body.abort_all_requests is True
    return False


def pinned(example: Example) -> tuple[Example, Optional[int]]:
    """A valid ``/partial_generate`` made quick to run: ``max_new_tokens`` capped (unless far past
    the context, which the model check refuses) and a request id. Returns the example to send
    and the ``max_new_tokens`` the server will honour (None: not a valid generation)."""
    if example.path != "/partial_generate" or accepted(PartialGenerateRequest, example.content) is None:
        return example, None
    data = json.loads(example.content or b"{}")
    sampling = data.setdefault("sampling_params", {})
    max_new = sampling.get("max_new_tokens", 128)
    if max_new < BEYOND_CONTEXT:
        max_new = sampling["max_new_tokens"] = min(max_new, SHORT_GENERATION)
    data.setdefault("request_id", None)
    if data["request_id"] is None:
        data["request_id"] = f"fuzz-{uuid.uuid4().hex[:12]}"
    content = json_bytes(data, ascii_only=True)
    return Example(example.method, example.path, content, example.params, example.content_type), max_new


# --- the survivors -------------------------------------------------------------------------


class Survivors(threading.Thread):
    """Long generations one after another, so that one is running during the whole fuzz."""

    def __init__(self, target) -> None:
        super().__init__(daemon=True, name="fuzz-survivors")
        self.target = target
        self.stop = threading.Event()
        self.results: list[tuple[str, int, Any]] = []
        self.failure: Optional[BaseException] = None

    def run(self) -> None:
        headers = contract_headers(self.target)
        # A survivor takes seconds on a real engine: the no-hang timeout is for the fuzzed calls.
        with httpx.Client(base_url=self.target.url, headers=headers, timeout=httpx.Timeout(300.0, connect=30.0)) as http:
            n = 0
            while not self.stop.is_set():
                request_id = f"{SURVIVOR_PREFIX}-{n}"
                body = {
                    "input_ids": [1, 15, 27, 33, 41],
                    "request_id": request_id,
                    "sampling_params": {"max_new_tokens": self.target.long_tokens, "ignore_eos": True},
                }
                try:
                    response = http.post("/partial_generate", json=body)
                except BaseException as exc:  # reported by the test, never lost in the thread
                    self.failure = exc
                    return
                self.results.append((request_id, response.status_code, response.text))
                n += 1


def wait_in_flight(http: httpx.Client, n: int) -> None:
    """Poll /v1/loads until *n* requests are in flight; a setup failure if they never are."""
    end = time.monotonic() + DEADLINE_S
    while (loads := http.get("/v1/loads").json())["in_flight"] < n:
        if time.monotonic() > end:
            raise AssertionError(f"setup: the survivor was not in flight within {DEADLINE_S} s; last loads: {loads}")
        time.sleep(0.02)


# --- the test ------------------------------------------------------------------------------


# The request model of each route that reads a body: a body it refuses (a value past a bound
# among them) must never be answered 200.
REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "/abort_requests": AbortRequest,
    "/update_weight_version": UpdateWeightVersionRequest,
    "/partial_generate": PartialGenerateRequest,
    "/pause": PauseRequest,
}


def past_a_bound(content: Optional[bytes]) -> Optional[str]:
    """A value in the JSON *content* past a bound of the contract, said in words, or None.

    Written from the documented bounds (docs/contract.md), not from the request models, so that a model that lost a
    bound fails the fuzz: no integer field takes one outside -1 .. 2**31 - 1, no string field
    one over 256 characters, ``timeout_s`` stops at 3600 and ``temperature`` at 2.
    """
    try:
        data = json.loads(content or b"{}")
    except (ValueError, RecursionError):
        return None

    def walk(value: Any, where: str) -> Optional[str]:
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, int) and not -1 <= value <= INT32_MAX:
            return f"{where} = {str(value)[:40]}"
        if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
            return f"{where}: {len(value)} characters"
        if isinstance(value, float) and where.endswith("timeout_s") and value > MAX_TIMEOUT_S:
            return f"{where} = {value}"
        if isinstance(value, float) and where.endswith("temperature") and value > MAX_TEMPERATURE:
            return f"{where} = {value}"
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            found = walk(item, f"{where}.{key}" if where else str(key))
            if found:
                return found
        return None

    return walk(data, "")


def check_answer(example: Example, response: httpx.Response, max_new: Optional[int]) -> None:
    """The properties of one answer: below 500; a 4xx is the contract's JSON error; a 200 fits
    the route's answer model and answers a body the route's request model accepts, and a valid
    generation is a complete, uncancelled result."""
    what = f"{example!r} -> {response.status_code} {response.text[:500]}"
    assert response.status_code < 500, what
    if response.status_code >= 400:
        assert 400 <= response.status_code < 500, what
        ErrorBody.model_validate(response.json()["error"])
        return
    assert response.status_code == 200, what
    model = REQUEST_MODELS.get(example.path) if example.method == "POST" else None
    if model is not None:
        assert accepted(model, example.content) is not None, f"the server accepted a body its model refuses: {what}"
        beyond = past_a_bound(example.content)
        assert beyond is None, f"the server accepted {beyond}, past its bound: {what}"
    data = response.json()
    ANSWERS[(example.method, example.path)].model_validate(data)
    if example.path == "/partial_generate":
        assert max_new is not None, f"the server accepted a body its model refuses: {what}"
        assert_partial(data, max_new)
        assert data["cancelled"] is False and data["finish_reason"] in ("stop", "length"), what


def test_fuzzed_requests_never_fail_the_server_nor_the_generation_running(target, pytestconfig):
    real = target.real
    headers = contract_headers(target)
    survivors = Survivors(target)
    sent = {"count": 0}
    with httpx.Client(base_url=target.url, headers=headers, timeout=httpx.Timeout(REQUEST_TIMEOUT_S)) as http:
        survivors.start()
        try:
            wait_in_flight(http, 1)

            @settings(
                max_examples=rounds(pytestconfig, EXAMPLES["real" if real else "fast"], target.name),
                deadline=None,
                database=None,
                print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
            )
            @given(drawn=EXAMPLES_STRATEGY)
            def fuzz(drawn: Example) -> None:
                assume(not would_cut_survivors(drawn))
                example, max_new = pinned(drawn)
                note(repr(example))
                request_headers = {} if example.content_type is None else {"Content-Type": example.content_type}
                try:
                    response = http.request(example.method, example.path, content=example.content, params=example.params, headers=request_headers)
                except httpx.TimeoutException:
                    raise AssertionError(f"no answer within {REQUEST_TIMEOUT_S} s: {example!r}") from None
                sent["count"] += 1
                check_answer(example, response, max_new)

            fuzz()
        finally:
            survivors.stop.set()
            survivors.join(DEADLINE_S * 5)
        assert not survivors.is_alive(), "the last survivor never returned"
        assert survivors.failure is None, f"a survivor's call failed: {survivors.failure!r}"
        assert survivors.results, "no survivor ran"
        for request_id, status, text in survivors.results:
            assert status == 200, f"survivor {request_id}: {status} {text[:500]}"
            result = json.loads(text)
            assert result["finish_reason"] == "length" and result["cancelled"] is False, f"survivor {request_id} was cut: {text[:500]}"
            assert len(result["output_ids"]) == target.long_tokens
            assert_partial(result, target.long_tokens)
        loads = http.get("/v1/loads").json()
        assert loads["in_flight"] == 0, f"requests left in flight after the fuzz: {loads}"
        assert http.get("/is_paused").json()["is_paused"] is False
        # The server still serves; and the version in force is a short name again for the tests after.
        fresh = http.post(
            "/partial_generate",
            json={"input_ids": [1, 15, 27], "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}},
            timeout=DEADLINE_S,
        )
        assert fresh.status_code == 200 and fresh.json()["finish_reason"] == "length" and len(fresh.json()["output_ids"]) == 8, fresh.text
        assert http.post("/update_weight_version", json={"new_version": "after-fuzz"}).status_code == 200
    print(f"fuzz on {target.name}: {sent['count']} requests sent, {len(survivors.results)} survivors ran to the end")


@pytest.mark.parametrize("raw", DEEP_NESTING, ids=["nested-lists", "nested-objects"])
def test_deeply_nested_json_is_a_400(target, raw):
    headers = contract_headers(target)
    with httpx.Client(base_url=target.url, headers=headers, timeout=httpx.Timeout(REQUEST_TIMEOUT_S)) as http:
        for path in ("/abort_requests", "/update_weight_version", "/partial_generate", "/pause"):
            response = http.post(path, content=raw, headers={"Content-Type": "application/json"})
            assert response.status_code == 400, f"{path} {raw[:20]!r}... -> {response.status_code} {response.text[:300]}"
            ErrorBody.model_validate(response.json()["error"])
        assert http.get("/is_paused").json()["is_paused"] is False
