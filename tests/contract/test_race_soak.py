"""Race soak (issue 12): rounds of concurrent generations mixed with every control call.

Each round starts a few ``/partial_generate`` (some with ``max_staleness``, lengths from a few
tokens to ``target.long_tokens``) and, at small random delays, a random mix of abort-all (with
and without wait), abort by id (known and unknown ids), version bumps (with and without
``abort_all_requests``), pauses in ``abort`` and ``keep`` mode, resumes, clients hanging up
mid-generation and, on SGLang, SGLang's own ``/pause_generation`` (each mode) and
``/continue_generation``, which share the contract's pause state. Every round is seeded (``SEED + round``) and every failure names its seed, so a
failing round replays with the same choices (the timings differ, as races do).

A round ends with a fence: resume, then an abort of everything with wait, which must answer
idle with nothing in flight and no timeout. Then, per round:

- every client that did not hang up got a 200 with a well-formed result, or a 4xx with the
  contract's JSON error; no 5xx, no exception;
- every client is answered within a short grace after the fence: nobody generates after it;
- a cancelled result has fewer tokens than it asked for;
- ``/v1/loads`` reports nothing in flight and not paused, and a short generation finishes: a
  server left paused while it says it is not fails here.

After all rounds the engine's log has no traceback it did not have before, and the
keep-alive client used throughout still works.

A focused soak on SGLang's fakes draws only aborts and scheduler pauses (the contract's keep,
SGLang's own ``in_place`` and ``retract``), where a pause can land between an abort and the
scheduler step that takes it: it finds in a few hundred rounds what the full soak hits about
once in fifty runs.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Optional

import httpx
import pytest

from engine_plugins.contract.schema import ErrorBody
from tiers import rounds as quick_rounds

from .api import ANSWERS, Api, assert_partial, contract_headers

pytestmark = pytest.mark.anyio

SEED = 20_240_612
# The minimum counts. Rounds are sized so that the fast targets do theirs in well under
# a minute and each real engine in under about three.
ROUNDS = {"real": 30, "fast": 500}
# The spread of the random delays before each call of a round. On a real engine a request takes
# hundreds of milliseconds to reach its first token, so the calls are spread wider there to land
# on running generations, not only on requests being tokenized.
JITTER_S = {"real": 0.5, "fast": 0.05}
# How long after the fence every client must have its answer. The fence reported nothing in
# flight, so the answers are already on their way; only a request that still generates (for
# seconds: long_tokens) misses it. Wider on real engines, whose HTTP loop can stall.
GRACE_S = {"real": 15.0, "fast": 2.0}
FENCE_TIMEOUT_S = 30
# The control calls a round draws from; SGLang's own pause and continue on SGLang.
CONTROL_KINDS = ["abort_all", "abort_ids", "bump", "pause_abort", "pause_keep", "resume"]
NATIVE_PAUSE_KINDS = ["native_pause", "native_continue"]
# The focused soak: aborts against scheduler pauses only, where SGLang's scheduler takes an abort
# at its next step and a pause can land first. It found in 111 to 387 rounds what 45 runs of the
# full soak (500 rounds each) hit once.
FOCUSED_KINDS = ["abort_all", "abort_ids", "pause_keep", "resume", *NATIVE_PAUSE_KINDS]
FOCUSED_ROUNDS = 400
FOCUSED_BASE = 100_000
# SGLang's own pause routes (served by the plugin there): their answers are SGLang's, not a contract model.
NATIVE_PAUSE_PATHS = ("/pause_generation", "/continue_generation")


class Round:
    """One round's random choices and what its clients got back."""

    def __init__(self, api: Api, number: int, real: bool, kinds: Optional[list[str]] = None) -> None:
        self.api = api
        self.native_pause = api.target.name.startswith("sglang")
        self.kinds = kinds or [*CONTROL_KINDS, *(NATIVE_PAUSE_KINDS if self.native_pause else [])]
        self.seed = SEED + number
        self.rng = random.Random(self.seed)
        self.real = real
        self.number = number
        self.jitter = JITTER_S["real" if real else "fast"]
        self.problems: list[str] = []

    def fail(self, what: str) -> None:
        self.problems.append(what)

    def max_new_tokens(self) -> int:
        long = self.api.target.long_tokens
        return self.rng.choice([self.rng.randint(1, 16), self.rng.randint(16, 200), long, long])

    async def delay(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)

    # --- the clients ----------------------------------------------------------------------

    async def generate(self, request_id: str, max_new: int, max_staleness: Optional[int], delay_s: float) -> tuple[int, Any]:
        """One generation; (status, JSON) as received. Exceptions propagate to the round."""
        await self.delay(delay_s)
        body: dict[str, Any] = {
            "input_ids": [1, 15, 27, 33, 41],
            "request_id": request_id,
            "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True},
        }
        if max_staleness is not None:
            body["max_staleness"] = max_staleness
        response = await self.api.http.post("/partial_generate", json=body)
        return response.status_code, response.json()

    async def hang_up(self, request_id: str, own_client: bool, delay_s: float, after_s: float) -> None:
        """A client that sends a long generation and goes away: its task is cancelled (on the
        shared client, which closes that one connection) or its own client is closed."""
        await self.delay(delay_s)
        target = self.api.target
        body = {"input_ids": [1, 15, 27], "request_id": request_id, "sampling_params": {"max_new_tokens": target.long_tokens, "ignore_eos": True}}
        http = self.api.http
        if own_client:
            http = httpx.AsyncClient(base_url=target.url, headers=contract_headers(target), timeout=300)
        task = asyncio.ensure_future(http.post("/partial_generate", json=body))
        await asyncio.sleep(after_s)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except httpx.HTTPError:
            pass  # the hang-up raced with the answer: either is fine for a client that left
        else:
            pass  # it finished (e.g. refused at once during an abort pause) before the hang-up
        if own_client:
            await http.aclose()

    # --- the chaos ------------------------------------------------------------------------

    def plan_control(self, ids: list[str]) -> tuple[str, Optional[dict], dict[str, str], str]:
        """One random control call, drawn before the round starts (so that the seed alone fixes
        every choice, whatever order the calls run in): (path, body, query, kind)."""
        rng = self.rng
        kind = rng.choice(self.kinds)
        params: dict[str, str] = {}
        body: Optional[dict] = None
        if kind == "abort_all":
            body = rng.choice([{}, {"wait": True, "timeout_s": FENCE_TIMEOUT_S}, {"request_ids": []}, None])
            path = "/abort_requests"
        elif kind == "abort_ids":
            chosen = rng.sample(ids, rng.randint(0, len(ids))) + [f"soak-unknown-{rng.randint(0, 99)}"]
            body = {"request_ids": chosen, "wait": rng.random() < 0.5, "timeout_s": FENCE_TIMEOUT_S}
            path = "/abort_requests"
        elif kind == "bump":
            body = {"new_version": f"soak-{self.number}-{rng.randint(0, 9)}"}
            abort_all = rng.choice([None, False, True])
            if abort_all is not None:
                body["abort_all_requests"] = abort_all
            path = "/update_weight_version"
        elif kind in ("pause_abort", "pause_keep"):
            mode = kind.split("_")[1]
            if rng.random() < 0.5:
                params = {"mode": mode}
            else:
                body = {"mode": mode}
            path = "/pause"
        elif kind == "native_pause":
            body = rng.choice([{}, {"mode": "abort"}, {"mode": "in_place"}, {"mode": "retract"}])
            path = "/pause_generation"
        elif kind == "native_continue":
            body = {}
            path = "/continue_generation"
        else:
            path = "/resume"
        return path, body, params, kind

    async def control(self, plan: tuple[str, Optional[dict], dict[str, str], str], delay_s: float) -> None:
        """Send one planned control call; its answer must be a 200 that fits its model or a 4xx."""
        path, body, params, kind = plan
        await self.delay(delay_s)
        what = f"{kind} {path} {body} {params}"
        response = await (self.api.post(path, body, params=params) if body is not None else self.api.http.post(path, params=params))
        if path in NATIVE_PAUSE_PATHS:
            if response.status_code != 200:
                self.fail(f"{what}: status {response.status_code}: {response.text[:300]}")
            return
        self.check_answer("POST", path, what, response.status_code, response.json())
        if path == "/abort_requests" and response.status_code == 200 and (body or {}).get("wait"):
            if response.json()["timed_out"]:
                # The server logs which requests were left in flight, and their states.
                said = [line for line in self.api.target.log_tail().splitlines() if "an abort with wait timed out" in line]
                self.fail(f"{what}: an abort with wait timed out: {response.json()}; the server said: {said[-1:]}")

    def check_answer(self, method: str, path: str, what: str, status: int, data: Any) -> bool:
        """A 200 that fits the route's model (True), or a 4xx with the JSON error (False)."""
        if status == 200:
            try:
                ANSWERS[(method, path)].model_validate(data)
            except Exception as exc:  # noqa: BLE001 - reported with the round's seed
                self.fail(f"{what}: a 200 its model refuses: {exc}; {str(data)[:300]}")
                return False
            return True
        if 400 <= status < 500:
            try:
                ErrorBody.model_validate(data["error"])
            except Exception:  # noqa: BLE001
                self.fail(f"{what}: a {status} without the JSON error body: {str(data)[:300]}")
        else:
            self.fail(f"{what}: status {status}: {str(data)[:300]}")
        return False

    # --- the round ------------------------------------------------------------------------

    async def run(self) -> None:
        rng, api = self.rng, self.api
        n = rng.randint(3, 6)
        ids = [f"soak-{self.seed}-{i}" for i in range(n)]
        asked = {rid: self.max_new_tokens() for rid in ids}
        generations = {
            rid: asyncio.create_task(
                self.generate(rid, asked[rid], rng.choice([None, None, 1, 2]), rng.uniform(0, self.jitter / 5))
            )
            for rid in ids
        }
        hang_ups = [
            asyncio.create_task(self.hang_up(f"soak-{self.seed}-gone-{k}", rng.random() < 0.3, rng.uniform(0, self.jitter), rng.uniform(0, self.jitter)))
            for k in range(rng.choice([0, 0, 1, 2]))
        ]
        plans = [(self.plan_control(ids), rng.uniform(0, self.jitter)) for _ in range(rng.randint(2, 5))]
        controls = [asyncio.create_task(self.control(plan, delay_s)) for plan, delay_s in plans]
        errors = [r for r in await asyncio.gather(*controls, *hang_ups, return_exceptions=True) if isinstance(r, BaseException)]
        for exc in errors:
            self.fail(f"a control call or hang-up raised {exc!r}")

        # Every generation must have reached the server before the fence, or it would arrive
        # after it and rightly run on: wait until the server holds all that are still pending.
        def all_admitted(loads: dict) -> bool:
            return loads["in_flight"] >= sum(not t.done() for t in generations.values())

        await api.ok("POST", "/resume")
        await api.wait_for(f"round seed {self.seed}: every generation admitted", all_admitted)
        await api.ok("POST", "/resume")
        fence = await api.ok("POST", "/abort_requests", {"wait": True, "timeout_s": FENCE_TIMEOUT_S})
        if not (fence["idle"] is True and fence["in_flight"] == 0 and fence["timed_out"] is False):
            self.fail(f"the fence did not leave the server idle: {fence}")
        grace = GRACE_S["real" if self.real else "fast"]
        done, pending = await asyncio.wait(generations.values(), timeout=grace)
        for task in pending:
            task.cancel()
        for rid, task in generations.items():
            what = f"partial_generate {rid} (max_new_tokens {asked[rid]})"
            if task in pending:
                self.fail(f"{what}: still not answered {grace} s after the fence, which reported nothing in flight")
                continue
            if task.exception() is not None:
                self.fail(f"{what}: raised {task.exception()!r}")
                continue
            status, data = task.result()
            if not self.check_answer("POST", "/partial_generate", what, status, data):
                continue
            try:
                assert_partial(data, asked[rid])
            except AssertionError as exc:
                self.fail(f"{what}: a malformed result ({exc}): {str(data)[:300]}")
            if data["cancelled"] and len(data["output_ids"]) >= asked[rid]:
                self.fail(f"{what}: cancelled with all {len(data['output_ids'])} tokens: {str(data)[:300]}")
        loads = await api.loads()
        if loads["in_flight"] != 0:
            self.fail(f"in flight after the fence: {loads}")
        if loads["paused"]:
            self.fail(f"still paused after resume: {loads}")
        try:
            last = await asyncio.wait_for(api.generate(2, request_id=f"soak-{self.seed}-after"), grace * 4)
        except asyncio.TimeoutError:
            self.fail(f"a 2-token generation after the round did not finish in {grace * 4} s: the server is paused (loads: {loads})")
        else:
            if last["finish_reason"] != "length":
                self.fail(f"a 2-token generation after the round did not run to its end: {last}")


def new_log_lines(before: list[str], now: list[str]) -> list[str]:
    """The lines of the log tail *now* that were not in the tail *before* (the tail is a sliding
    window, so the old part is found by the longest overlap of before's end and now's start)."""
    for start in range(len(before) + 1):
        overlap = before[start:]
        if now[: len(overlap)] == overlap:
            return now[len(overlap):]
    return now


async def test_race_soak_leaves_every_round_idle_well_answered_and_fenced(target, pytestconfig):
    await soak(target, range(quick_rounds(pytestconfig, ROUNDS["real" if target.real else "fast"], target.name)))


@pytest.mark.targets("sglang-stub", "sglang-stub-dp2", "sglang-0.5.19-stub", "sglang-0.5.18-stub", "sglang-0.5.17-stub", "sglang-0.5.16-stub",
                      "sglang-0.5.12-stub")
async def test_a_soak_of_aborts_and_scheduler_pauses_leaves_every_round_idle(target, pytestconfig):
    # Rounds numbered apart from the full soak's, so that their seeds are new.
    await soak(target, range(FOCUSED_BASE, FOCUSED_BASE + quick_rounds(pytestconfig, FOCUSED_ROUNDS, target.name)), FOCUSED_KINDS)


async def soak(target: Any, numbers: range, kinds: Optional[list[str]] = None) -> None:
    """Run the rounds *numbers* (each seeded by its number) drawing control calls from *kinds*
    (default: all of them); fail at the first round with a problem, or on a new traceback."""
    real = target.real
    tail = target.log_tail().splitlines()
    new_tracebacks: list[str] = []
    started = time.monotonic()
    async with Api(target) as api:
        await api.warm(8)
        for number in numbers:
            round_ = Round(api, number, real, kinds)
            await round_.run()
            assert not round_.problems, f"round {number} (seed {round_.seed}):\n" + "\n".join(round_.problems)
            # The tail is a window: read it every round so that no traceback scrolls past.
            now = target.log_tail().splitlines()
            fresh = new_log_lines(tail, now)
            if any("Traceback" in line for line in fresh):
                new_tracebacks.append(f"after round {number} (seed {round_.seed}):\n" + "\n".join(fresh[-60:]))
            tail = now
        # The keep-alive client used for every round still gets answers.
        final = await api.http.get("/v1/loads")
        assert final.status_code == 200 and final.json()["in_flight"] == 0, final.text
    assert not new_tracebacks, "the engine logged tracebacks during the soak:\n" + "\n\n".join(new_tracebacks)
    print(f"race soak on {target.name}: {len(numbers)} rounds in {time.monotonic() - started:.1f} s")


async def test_a_generation_aborted_before_its_first_token_has_no_span(target):
    async with Api(target) as api:
        await api.warm(4)
        rng = random.Random(SEED)
        empty = []
        for i in range(10 if target.real else 100):
            task = asyncio.create_task(api.generate(target.long_tokens, request_id=f"early-{i}"))
            await asyncio.sleep(rng.uniform(0, 0.01))
            await api.ok("POST", "/abort_requests", {"request_ids": [f"early-{i}"], "wait": True, "timeout_s": FENCE_TIMEOUT_S})
            # An abort by id can miss a request not yet admitted: the abort-all cuts it too.
            await api.ok("POST", "/abort_requests", {"wait": True, "timeout_s": FENCE_TIMEOUT_S})
            result = await task
            if not result["output_ids"]:
                empty.append(result)
    for result in empty:
        assert result["weight_versions"] == [], result


async def test_a_client_hanging_up_before_its_body_is_read_logs_no_traceback(target):
    before = target.log_tail().splitlines()
    host, port = target.url.removeprefix("http://").split(":")
    head = (
        f"POST /partial_generate HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {target.api_key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head + b'{"input_ids": [1')  # far less than the 1000 bytes announced
    await writer.drain()
    await asyncio.sleep(0.2)  # let the server start reading the body before the client leaves
    writer.close()
    await writer.wait_closed()
    async with Api(target) as api:
        # The server is still fine; a later call lets its log catch up with the hang-up.
        await api.generate(4)
        await asyncio.sleep(0.5)
    fresh = new_log_lines(before, target.log_tail().splitlines())
    assert not any("Traceback" in line for line in fresh), "\n".join(fresh[-40:])
