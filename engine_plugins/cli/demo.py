"""``engine-plugins demo``: a short RL-style loop through the client, on a running server (``--url``).

Generate a batch of partial generations; pause in abort mode mid-way and salvage every sample's
partial tokens; drain; bump the weight version; resume, each sample continuing from its own tokens;
finish, and print tokens per version, cancel/salvage counts and timings.
"""

from __future__ import annotations

import asyncio
import time
from typing import Optional

from engine_plugins.client import Flavor, Rollout, ServerClient, ServerError, run_rollout, tokens_per_version
from engine_plugins.client.polling import Backoff, Deadline
from engine_plugins.cli import exit_codes
from engine_plugins.cli.render import print_json, print_table, print_text

SETUP_DEADLINE_S = 300.0


class DemoFailed(Exception):
    """The demo could not do what it shows; the message says what happened."""


def run(args, api_key: Optional[str]) -> int:
    """Run the demo; the exit code says whether it did everything it shows."""
    try:
        summary = asyncio.run(rl_loop(args.url, api_key, args.samples, args.max_new_tokens, args.abort_after))
    except (DemoFailed, ServerError) as exc:
        print_text(f"demo failed: {exc}", err=True)
        return exit_codes.FAILED
    _report(summary, args.json)
    return exit_codes.OK


async def rl_loop(url: str, api_key: Optional[str], samples: int, max_new_tokens: int, abort_after_s: float) -> dict:
    """The RL-style loop against *url*; returns the summary, or raises DemoFailed."""
    async with ServerClient(url, api_key=api_key) as server:
        found = await server.detection()
        if found.flavor is not Flavor.CONTRACT:
            raise DemoFailed(f"{url} is {found.detail}; the demo needs the engine-plugins contract (partial_generate)")
        old_version = (await server.loads()).weight_version or "default"
        new_version = f"demo-{int(time.time())}"
        rollouts = [Rollout([1, 15, 27, 33, 41 + i], max_new_tokens) for i in range(samples)]
        first_cancel: dict[int, int] = {}
        salvaged_all = asyncio.Event()

        def on_attempt(rollout: Rollout, attempt) -> None:
            i = rollouts.index(rollout)
            if attempt.cancelled and i not in first_cancel:
                first_cancel[i] = len(rollout.output_ids)
            if all(r.done or j in first_cancel for j, r in enumerate(rollouts)):
                salvaged_all.set()

        t0 = time.monotonic()
        tasks = [asyncio.create_task(run_rollout(r, [server], {"temperature": 1.0, "ignore_eos": True},
                                                 max_resubmits=4, resume_timeout_s=120.0, request_id=f"demo-{i}",
                                                 on_attempt=on_attempt))
                 for i, r in enumerate(rollouts)]
        try:
            await _wait_running(server, samples)
            await asyncio.sleep(abort_after_s)  # let every sample generate part of its tokens
            t_abort = time.monotonic()
            paused = await server.pause("abort")
            pause_s = time.monotonic() - t_abort
            await asyncio.wait_for(salvaged_all.wait(), SETUP_DEADLINE_S)
            salvage_s = time.monotonic() - t_abort
            drained = await server.abort_until_idle(timeout_s=60.0)
            t_version = time.monotonic()
            bumped = await server.update_weight_version(new_version)
            version_s = time.monotonic() - t_version
            t_resume = time.monotonic()
            await server.resume()
            await asyncio.wait_for(asyncio.gather(*tasks), SETUP_DEADLINE_S)
            finish_s = time.monotonic() - t_resume
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await _resume_quietly(server)
    summary = {
        "url": url, "api": found.detail, "samples": samples, "max_new_tokens": max_new_tokens,
        "versions": [old_version, new_version], "paused": paused.to_dict(), "drain": drained.to_dict(),
        "version_bump": bumped.to_dict(),
        "timings_s": {"generate_until_abort": round(t_abort - t0, 3), "pause_abort_call": round(pause_s, 4),
                      "all_partials_back": round(salvage_s, 4), "version_bump": round(version_s, 4),
                      "resume_to_finish": round(finish_s, 3), "total": round(time.monotonic() - t0, 3)},
        "cancelled": len(first_cancel), "salvaged_tokens": sum(first_cancel.values()),
        "tokens_per_version": tokens_per_version(rollouts),
        "per_sample": [{**r.to_dict(), "salvaged": first_cancel.get(i, 0), "tokens_per_version": r.tokens_per_version()}
                       for i, r in enumerate(rollouts)],
    }
    _check(summary, rollouts, first_cancel, old_version, new_version)
    return summary


async def _wait_running(server: ServerClient, n: int) -> None:
    deadline, backoff = Deadline.after(SETUP_DEADLINE_S), Backoff(0.01, 0.2)
    while True:
        load = await server.loads()
        if load.running >= n:
            return
        if deadline.expired():
            raise DemoFailed(f"only {load.running} of {n} samples running after {SETUP_DEADLINE_S:g} s")
        await backoff.sleep(deadline)


async def _resume_quietly(server: ServerClient) -> None:
    try:
        await server.resume(10.0)
    except ServerError:
        pass  # best effort on the way out; the failure that got us here is what matters


def _check(summary: dict, rollouts: list[Rollout], first_cancel: dict, old: str, new: str) -> None:
    problems = []
    for i, r in enumerate(rollouts):
        if r.finish_reason != "length" or len(r.output_ids) != r.max_new_tokens:
            problems.append(f"sample {i}: {len(r.output_ids)} tokens, finish {r.finish_reason} ({r.gave_up or 'no reason'})")
        elif i in first_cancel and r.token_versions != [old] * first_cancel[i] + [new] * (r.max_new_tokens - first_cancel[i]):
            problems.append(f"sample {i}: versions {r.version_spans()}, expected {old} for the first {first_cancel[i]} tokens then {new}")
    if not first_cancel or summary["salvaged_tokens"] == 0:
        problems.append("no sample was in flight when the demo paused: raise --max-new-tokens")
    if problems:
        raise DemoFailed("; ".join(problems))


def _report(summary: dict, as_json: bool) -> None:
    if as_json:
        print_json(summary)
        return
    old, new = summary["versions"]
    t = summary["timings_s"]
    print_text(f"demo against {summary['url']} ({summary['api']})")
    rows = [[i, s["salvaged"], s["tokens_per_version"].get(old, 0), s["tokens_per_version"].get(new, 0),
             s["output_len"], s["attempts"], s["finish_reason"]] for i, s in enumerate(summary["per_sample"])]
    print_table(f"{summary['samples']} samples x {summary['max_new_tokens']} tokens",
                ["sample", "salvaged at abort", f"tokens @ {old}", f"tokens @ {new}", "total", "attempts", "finish"], rows)
    print_table("summary", ["what", "value"], [
        ["aborted mid-way (pause abort)", f"{summary['cancelled']}/{summary['samples']} samples"],
        ["partial tokens salvaged", summary["salvaged_tokens"]],
        ["tokens per version", ", ".join(f"{v}: {n}" for v, n in summary["tokens_per_version"].items())],
        ["generate until abort", f"{t['generate_until_abort']:.3f} s"],
        ["pause(abort) call", f"{t['pause_abort_call'] * 1000:.1f} ms"],
        ["every partial back", f"{t['all_partials_back'] * 1000:.1f} ms"],
        ["weight version bump", f"{old} -> {new} in {t['version_bump'] * 1000:.1f} ms"],
        ["resume to all finished", f"{t['resume_to_finish']:.3f} s"],
        ["total", f"{t['total']:.3f} s"],
    ])
