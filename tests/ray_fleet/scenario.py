"""The partial-rollout scenario across a weight swap, on any fleet (engines in Ray actors, HTTP
servers, or both), with the client's own pieces only: ``run_rollout`` and the fleet's operations.

1. rollouts in flight on every server (the contract's ``partial_generate``, through ``run_rollout``);
2. cancel them all: ``fleet.pause("abort")``: each attempt comes back with its tokens, their
   logprobs and weight-version spans so far (recorded here at the cancel);
3. the weight swap through the fleet: ``begin_weight_swap``, the load (*load*: the engine's own
   reload, or none for a version-only swap), ``commit_weight_swap`` (which resumes);
4. resume: each rollout continues from its tokens (prompt + output so far, the remaining
   ``max_new_tokens``) and runs to its length.

Nothing may be lost: every token from before the cancel is kept, in order, labelled with the old
version, and the continuation with the new one. :func:`run_scenario` returns a JSON-ready report
whose ``problems`` list says what went wrong (empty: all held). Shared by the fast test (a stub
engine in-process) and the Ray drivers (:mod:`ray_fleet.driver`), which run it in an engine's
interpreter.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Awaitable, Callable, Optional

from engine_plugins.client import Rollout, ServerClient, ServerFleet, run_rollout

Load = Callable[[ServerClient], Awaitable[str]]
"""Loads the new weights into one server inside the swap; returns what it did, in words."""

OLD, NEW = "scenario-v1", "scenario-v2"


async def version_only(server: ServerClient) -> str:
    """No weights change: the swap publishes the new version only."""
    return "version-only (no weights loaded)"


# Per engine: rollouts per server, their length, and how long they run before the cancel. A real
# engine on two cores makes some hundred tokens a second with the tiny model (48 tokens were done
# before a cancel one second in): long enough that the cancel always cuts them.
SIZES = {"stub": (3, 200, 0.2), "vllm": (2, 1500, 0.5), "sglang": (2, 1500, 0.5)}

async def run_scenario(fleet: ServerFleet, load: Load = version_only, per_server: int = 2, max_new_tokens: int = 200,
                       settle_s: float = 0.2, prompt_tokens: int = 12, timeout_s: float = 120.0) -> dict[str, Any]:
    """The scenario on *fleet* (see the module's docstring): *per_server* rollouts on each server
    of *max_new_tokens* each, cancelled *settle_s* after all of them run."""
    problems: list[str] = []
    started = time.monotonic()
    _ok(await fleet.update_weight_version(OLD), "set the old version", problems)
    rng = random.Random(7)
    resumed = asyncio.Event()
    at_cancel: dict[int, dict[str, Any]] = {}

    def on_attempt(rollout: Rollout, attempt: Any) -> None:
        if attempt.cancelled and id(rollout) not in at_cancel:
            at_cancel[id(rollout)] = {"ids": list(rollout.output_ids), "logprobs": list(rollout.output_logprobs),
                                      "spans": rollout.version_spans(), "error": attempt.error}

    rollouts, tasks = [], []
    for i, server in enumerate(fleet.servers):
        for j in range(per_server):
            rollout = Rollout([rng.randrange(3, 300) for _ in range(prompt_tokens)], max_new_tokens)
            rollouts.append((server.url, rollout))
            tasks.append(asyncio.create_task(run_rollout(
                rollout, [server], {"temperature": 1.0, "ignore_eos": True}, max_resubmits=2, resume_timeout_s=timeout_s,
                request_id=f"scenario-{i}-{j}", resume_signal=resumed, on_attempt=on_attempt)))
    await _all_running(fleet, per_server, tasks, timeout_s)
    await asyncio.sleep(settle_s)

    t = time.monotonic()
    cancelled = await fleet.pause("abort")
    _ok(cancelled, "cancel everything (pause abort)", problems)
    await _until(lambda: len(at_cancel) == len(rollouts) or any(task.done() for task in tasks), timeout_s)
    cancel_s = time.monotonic() - t

    t = time.monotonic()
    began = await fleet.begin_weight_swap(NEW, mode="abort")
    _ok(began, "begin the weight swap", problems)
    loaded = await asyncio.gather(*(load(s) for s in fleet.servers), return_exceptions=True)
    for server, what in zip(fleet.servers, loaded):
        if isinstance(what, BaseException):
            problems.append(f"{server.url}: the load failed: {type(what).__name__}: {what}")
    committed = await fleet.commit_weight_swap(NEW, began=[r.url for r in began.results if r.ok])
    _ok(committed, "commit the weight swap", problems)
    swap_s = time.monotonic() - t
    _ok(await fleet.resume(), "resume", problems)  # the commit resumed already: a no-op, as a framework sends it
    resumed.set()

    await asyncio.wait_for(asyncio.gather(*tasks), timeout_s)
    loads = await fleet.loads()
    _ok(loads, "read the loads", problems)
    report = {
        "servers": [s.url for s in fleet.servers],
        "load": [str(x) for x in loaded],
        "cancel_s": round(cancel_s, 3), "swap_s": round(swap_s, 3), "seconds": round(time.monotonic() - started, 3),
        "versions_after": sorted({r.value.weight_version for r in loads.results if r.ok}),
        "rollouts": [],
    }
    if report["versions_after"] != [NEW]:
        problems.append(f"the servers report versions {report['versions_after']} after the swap, not {NEW}")
    for url, rollout in rollouts:
        report["rollouts"].append(_check(url, rollout, at_cancel.get(id(rollout)), max_new_tokens, problems))
    report["problems"] = problems
    return report


def _check(url: str, rollout: Rollout, cancel: Optional[dict], max_new_tokens: int, problems: list[str]) -> dict[str, Any]:
    """One rollout's record, its problems added to *problems*."""
    name = f"{url} rollout of {len(rollout.prompt_ids)}+{max_new_tokens}"
    kept = len(cancel["ids"]) if cancel else 0
    record = {"server": url, "tokens_at_cancel": kept, "spans_at_cancel": cancel["spans"] if cancel else None,
              "tokens": len(rollout.output_ids), "spans": rollout.version_spans(), "attempts": len(rollout.attempts),
              "finish_reason": rollout.finish_reason}
    if cancel is None:
        problems.append(f"{name}: was not cancelled (it finished before the pause: make it longer)")
        return record
    if cancel["error"]:
        problems.append(f"{name}: its cancelled attempt failed: {cancel['error']}")
    if len(cancel["ids"]) != len(cancel["logprobs"]):
        problems.append(f"{name}: {len(cancel['ids'])} tokens but {len(cancel['logprobs'])} logprobs at the cancel")
    if kept and cancel["spans"] != [{"version": OLD, "start": 0, "end": kept}]:
        problems.append(f"{name}: spans at the cancel {cancel['spans']}, not all {OLD}")
    if rollout.output_ids[:kept] != cancel["ids"] or rollout.output_logprobs[:kept] != cancel["logprobs"]:
        problems.append(f"{name}: the tokens from before the cancel were not kept as they were")
    if rollout.finish_reason != "length" or len(rollout.output_ids) != max_new_tokens or rollout.gave_up:
        problems.append(f"{name}: ended {rollout.finish_reason} ({rollout.gave_up}) with {len(rollout.output_ids)} tokens")
    if len(rollout.output_logprobs) != len(rollout.output_ids):
        problems.append(f"{name}: {len(rollout.output_ids)} tokens but {len(rollout.output_logprobs)} logprobs")
    want = ([{"version": OLD, "start": 0, "end": kept}] if kept else []) + [{"version": NEW, "start": kept, "end": max_new_tokens}]
    if rollout.version_spans() != want:
        problems.append(f"{name}: spans {rollout.version_spans()}, not {want}")
    if len(rollout.attempts) != 2 or not rollout.attempts[0].cancelled or rollout.attempts[1].cancelled:
        problems.append(f"{name}: attempts {[(a.new_tokens, a.cancelled, a.error) for a in rollout.attempts]}, not one cancelled and one continued")
    return record


def _ok(result: Any, what: str, problems: list[str]) -> None:
    if not result.ok:
        problems.append(f"could not {what}: " + "; ".join(f"{r.url}: {r.kind}: {r.error}" for r in result.failed))


async def _all_running(fleet: ServerFleet, per_server: int, tasks: list[asyncio.Task], timeout_s: float) -> None:
    """Until every server runs its rollouts (a rollout that ends first fails the scenario's setup)."""
    end = time.monotonic() + timeout_s
    while True:
        for task in tasks:
            if task.done():
                raise AssertionError(f"a rollout ended before all were running: {task.exception() or task.result().to_dict()}")
        loads = await fleet.loads()
        if loads.ok and all(r.value.running >= per_server for r in loads.results):
            return
        if time.monotonic() > end:
            raise AssertionError(f"the rollouts were not all running within {timeout_s} s: {loads.to_dict()}")
        await asyncio.sleep(0.02)


async def _until(check: Callable[[], bool], timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not check() and time.monotonic() < end:
        await asyncio.sleep(0.01)
