"""Figure 9: the step boundary, framework by framework, on each real engine with real weights.

The same small RL step loop for every row. A step submits ``BATCH + OVERSAMPLE`` requests (short
prompts of their own, ``max_new_tokens`` long-tailed: lognormal, seeded by the step, capped;
``ignore_eos``, temperature 1.0) through the route the framework generates with (SGLang's
``/generate`` with ``input_ids``; vLLM's ``/v1/completions`` with a token-id prompt, prime-rl's
with its ``cache_salt``, the policy version the request started under; the contract's
``/partial_generate``). Once ``BATCH`` of them have finished, the boundary runs while the tail is
still in flight (:mod:`benchmarks.boundary_sequences`: the framework's pause or abort, flush,
weight load, version and continue or resume, as ``tests/swap/`` sends them), loading the other
checkpoint of ``tests/targets.make_checkpoints`` (A and B alternate) under a new version name.
Then the tail ends as the sequence leaves it (kept and finished, or aborted, and sent again with
its tokens where the framework does that).

Rows: each framework's sequence on the engine **without the plugin** (SGLang with
``SGLANG_PLUGINS`` naming no plugin; vLLM without ``VLLM_PLUGINS=engine_plugins``), the same
sequences **with the plugin** (the server started as the ``sglang-weights`` / ``vllm-weights``
test targets start it: ``--load-format auto`` from checkpoint A; vLLM in dev mode with the tests'
``file`` weight-transfer backend, which both vLLM servers get), and the contract's transaction
(``/weight_swap/begin {"version", "mode": "keep"}``, the engine's own load, ``/weight_swap/commit
{"version"}``). One server per engine and mode, both up at once, and the rows **interleaved per
step**: step i of every row, in an order reversed every other step (``common.in_turn``).

Per step:

- **lost**: requests in flight at the boundary whose tokens are thrown away: aborted (or failed)
  and not sent again with their tokens by that framework (each framework's rule:
  :mod:`benchmarks.boundary_sequences`); **tokens thrown**: the tokens those requests had
  returned.
- **boundary**: the sequence's first call to the answer of the call that lets generation go on.
- **failures**, counted by kind per step: *call* (an answer not 2xx, or ``success: false``; the
  ``/flush_cache`` refusals slime's and miles' loops expect and retry are counted apart, and only
  a flush never accepted fails); *probe* (the greedy probe of ``tests/swap/helpers.py`` after the
  boundary is not the new checkpoint's reference, measured once per server while idle: the
  engine's own load, then vLLM's ``/reset_prefix_cache``. Each step starts from an empty prefix
  cache (SGLang's ``/flush_cache``, vLLM's ``/reset_prefix_cache``, idle, outside the timing) and
  sends the probe's prompt once, so that KV computed under the old weights is there for the
  boundary to leave or not, and none that an earlier row left); *split* (the versions the
  engine reports, SGLang's ``/model_info`` and a new request's ``meta_info``, vLLM's
  ``/weight_info``, and the contract's ``/v1/loads`` with the plugin, are not one); *crash* (the
  server died: it is started again for the other rows, and the rest of that row's steps count
  as failed).

The table also counts the steps after which every version the engine reports is the step's own:
only slime, miles and NeMo-RL (with their tensors) and the contract (its commit) tell the engine a
version; AReaL, verl, ROLL, TRL, vime, SkyRL and prime-rl keep theirs client-side (the tests'
docstrings), so for them the engine's stays as it was by design, and only a split fails.

After a step that left the server elsewhere than the new checkpoint, it is loaded again while
idle (outside the timing), so that every step starts from known weights.

    .venv/bin/python -m benchmarks.step_boundary --engine sglang --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import sys
import time
from pathlib import Path
from typing import Optional

import httpx

from tools.launcher.engine_server import ensure_engine

from .boundary_sequences import FRAMEWORKS, Boundary, Framework, TensorSender
from .boundary_servers import KEY, Server, generate, probe, versions
from .common import REPO, in_turn, progress, read_json, rounds_default, stats, stop_cleanly_on_sigterm, write_json

sys.path.insert(0, str(REPO / "tests"))
from targets import make_checkpoints  # noqa: E402
BATCH, OVERSAMPLE = 16, 8
# max_new_tokens: lognormal around TOKENS_MEDIAN, capped, so a step's tail is a few long ones.
TOKENS_MEDIAN, TOKENS_SIGMA, TOKENS_MIN, TOKENS_CAP = 32, 0.8, 4, 128
PROMPT_TOKENS = 16
TAIL_TIMEOUT_S = 180.0
MODES = ("no plugin", "plugin")


# --- one step ----------------------------------------------------------------------------------


def step_requests(step: int) -> list[tuple[list[int], int]]:
    """Step *step*'s prompts and ``max_new_tokens`` (the same for every row)."""
    rng = random.Random(9000 + step)
    out = []
    for _ in range(BATCH + OVERSAMPLE):
        prompt = [rng.randrange(3, 300) for _ in range(PROMPT_TOKENS)]
        tokens = min(TOKENS_CAP, max(TOKENS_MIN, round(rng.lognormvariate(0, TOKENS_SIGMA) * TOKENS_MEDIAN)))
        out.append((prompt, tokens))
    return out


async def resend(server: Server, fw: Framework, asked: list[tuple[list[int], int]], results: list[dict]) -> list[dict]:
    """AReaL's and verl's way with aborted requests: each sent again, its tokens appended to its
    prompt, for the tokens it still lacks; the results, as finished."""
    again, out = {}, list(results)
    for i, result in enumerate(results):
        prompt, max_tokens = asked[i]
        if result["ok"] and result["finish"] == "abort" and len(result["tokens"]) < max_tokens:
            again[i] = generate(server, fw.route, prompt + result["tokens"], max_tokens - len(result["tokens"]), "")
        elif result["ok"] and result["finish"] == "abort":
            # Aborted at its last token: AReaL's loop stops once it has max_new_tokens, nothing to send.
            out[i] = result | {"complete": True}
    if again:
        await asyncio.wait(again.values(), timeout=TAIL_TIMEOUT_S)
    for i, task in again.items():
        rest = task.result() if task.done() else {"ok": False, "finish": "timeout", "tokens": [], "n": 0}
        out[i] = rest | {"n": results[i]["n"] + rest["n"], "resent": True}
    return out


async def one_step(server: Server, fw: Framework, step: int, sender: Optional[TensorSender]) -> dict:
    """Step *step* of row (*fw*, *server*): the rollouts, the boundary with the tail in flight,
    the tail's end, the probe and the versions; the step's record."""
    new = server.checkpoints[1] if server.loaded == server.checkpoints[0] else server.checkpoints[0]
    version = f"{re.sub(r'[^a-z0-9]+', '-', fw.name.lower()).strip('-')}-{'p' if server.plugin else 'n'}-{step}"
    salted = fw.route == "salted"  # prime-rl salts every request with the policy version it starts under
    # From an empty prefix cache, the probe's prompt cached under the old weights: so that what the
    # boundary leaves is its own, not KV an earlier row left (two swaps back: the same checkpoint).
    await server.empty_cache()
    warm = await probe(server, str(step) if salted else None)
    asked = step_requests(step)
    tasks = [generate(server, fw.route, prompt, tokens, str(step)) for prompt, tokens in asked]
    pending = set(tasks)
    while len(tasks) - len(pending) < BATCH:
        _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    tail = [t for t in tasks if t in pending]
    boundary = Boundary(server.http, new, version, tail, sender)
    await fw.boundary(boundary)
    done, still = await asyncio.wait(tasks, timeout=TAIL_TIMEOUT_S)
    for task in still:
        task.cancel()
    results = [t.result() if t in done else {"ok": False, "finish": "timeout", "tokens": [], "n": 0} for t in tasks]
    if fw.resends:
        results = await resend(server, fw, asked, results)
    tail_results = [r for t, r in zip(tasks, results) if t in tail]
    lost = [r for r in tail_results if not r["ok"] or (r["finish"] not in ("length", "stop") and not r.get("complete"))]
    after = await probe(server, str(step + 1) if salted else None)
    seen = await versions(server)
    failures = {
        "call": [f"{c.route} {c.status} {c.body[:120]}" for c in boundary.calls if not c.ok]
                + [f"request {r['finish']}" for r in results if not r["ok"]],
        "probe": [] if after == server.references[new] else [
            "no answer" if after is None else "previous checkpoint's" if after == server.references[server.loaded] else "neither checkpoint's"],
        "split": [] if len(set(seen)) <= 1 else [" / ".join(seen)],
    }
    record = {
        "in_flight": len(tail), "lost": len(lost), "thrown_tokens": sum(r["n"] for r in lost),
        "resent": sum(1 for r in tail_results if r.get("resent")),
        "boundary_ms": None if boundary.seconds() is None else round(boundary.seconds() * 1000, 1),
        "flush_refusals": boundary.flush_refusals, "versions": seen, "version": version,
        "started_right": warm == server.references[server.loaded],
        "calls": [[c.route, c.status] for c in boundary.calls],
        "failures": {kind: found for kind, found in failures.items() if found},
    }
    return record


async def after_step(server: Server, record: dict, new: Path) -> None:
    """Leave *server* unpaused, idle and on *new*, whatever the step left (outside the timing)."""
    if record["failures"]:
        resume = "/continue_generation" if server.engine == "sglang" else "/resume"
        with contextlib.suppress(httpx.HTTPError):
            await server.http.post(resume, json={}) if server.engine == "sglang" else await server.http.post(resume)
    if "probe" in record["failures"]:  # weights or KV other than the new checkpoint's
        await server.idle_load(new)
    server.loaded = new


def crashed_step(why: str) -> dict:
    """A step that could not run (its row's server died)."""
    return {"in_flight": 0, "lost": 0, "thrown_tokens": 0, "resent": 0, "boundary_ms": None, "flush_refusals": 0,
            "versions": [], "calls": [], "failures": {"crash": [why]}}


# --- the figure ---------------------------------------------------------------------------------


async def measure(engine: str, servers: dict[str, Server], rounds: int, sender: Optional[TensorSender]) -> dict:
    """Every row's steps, interleaved per step; the raw records per row."""
    rows = [(mode, fw) for mode in MODES for fw in FRAMEWORKS[engine] if not (fw.plugin_only and mode == "no plugin")]
    rows = [(mode, fw) for mode, fw in rows if not fw.uses_transfer or servers[mode].transfer_ready]
    results: dict[str, dict] = {f"{fw.name}|{mode}": {"framework": fw.name, "mode": "contract" if fw.plugin_only else mode,
                                                      "note": fw.note, "steps": []} for mode, fw in rows}
    stopped: set[str] = set()
    for step in range(rounds):
        started = time.monotonic()
        for mode, fw in in_turn(rows, step):
            key, server = f"{fw.name}|{mode}", servers[mode]
            if key in stopped:
                results[key]["steps"].append(crashed_step("row stopped after its server died"))
                continue
            new = server.checkpoints[1] if server.loaded == server.checkpoints[0] else server.checkpoints[0]
            began = time.monotonic()
            try:
                record = await asyncio.wait_for(one_step(server, fw, step, sender), TAIL_TIMEOUT_S * 2)
            except (asyncio.TimeoutError, httpx.HTTPError) as exc:
                record = crashed_step(f"{type(exc).__name__}: {exc}")
            if not await asyncio.to_thread(server.healthy):
                record["failures"].setdefault("crash", []).append("server died in this step")
                stopped.add(key)
                progress(f"  {engine} {mode}: the server died in {fw.name}'s step {step}; starting it again")
                await server.restart()
            else:
                await after_step(server, record, new)
            record["step_s"] = round(time.monotonic() - began, 2)
            results[key]["steps"].append(record)
        progress(f"  {engine} step {step + 1}/{rounds} ({time.monotonic() - started:.0f} s): " + ", ".join(
            f"{r['framework']}/{r['mode'][:2]} {'ok' if not r['steps'][-1]['failures'] else ','.join(r['steps'][-1]['failures'])}"
            for r in results.values()))
    return results


def run(engine: str, rounds: int) -> dict:
    """Figure 9 on *engine*: both servers up, every row's steps; the raw figures."""
    paths = ensure_engine(engine, REPO)
    checkpoints = make_checkpoints(paths.python, paths.model_dir)[:2]
    servers = {mode: Server(engine, mode == "plugin", checkpoints) for mode in MODES}
    senders: list[TensorSender] = []
    started = time.monotonic()
    try:
        # Both servers (and SGLang's tensor sender) start at once: a start is mostly imports and compilation.
        ready = [server.start() for server in servers.values()]
        if engine == "sglang":
            senders.append(TensorSender(paths.python, KEY))
        for event in ready:
            event.wait()
        for mode, server in servers.items():
            if server.error is not None:
                raise RuntimeError(f"{engine} ({mode}) did not start; log {server.process.log_path}:\n{server.process.log_tail(40)}")
        sender = senders[0] if senders else None
        progress(f"{engine}: servers up in {time.monotonic() - started:.0f} s")

        async def go() -> dict:
            try:
                for server in servers.values():
                    await server.setup()
                return await measure(engine, servers, rounds, sender)
            finally:
                for server in servers.values():
                    if server.http is not None:
                        await server.http.aclose()
                        server.http = None

        rows = asyncio.run(go())
    finally:
        for sender in senders:
            sender.close()
        for server in servers.values():
            server.stop()
    return {"engine": engine, "rounds": rounds, "batch": BATCH, "oversample": OVERSAMPLE,
            "max_new_tokens": {"median": TOKENS_MEDIAN, "sigma": TOKENS_SIGMA, "min": TOKENS_MIN, "cap": TOKENS_CAP},
            "server_starts_s": {mode: s.starts for mode, s in servers.items()}, "seconds": round(time.monotonic() - started, 1),
            "rows": list(rows.values())}


# --- the table ---------------------------------------------------------------------------------


def _mp(values: list[float], fmt: str = "{:.0f}") -> str:
    """``median / p95`` of *values*, or ``-``."""
    s = stats(values)
    return "-" if not s["n"] else f"{fmt.format(s['median'])} / {fmt.format(s['p95'])}"


def failure_counts(steps: list[dict]) -> str:
    """Steps failed, of all, and by kind."""
    kinds: dict[str, int] = {}
    for s in steps:
        for kind in s["failures"]:
            kinds[kind] = kinds.get(kind, 0) + 1
    failed = sum(1 for s in steps if s["failures"])
    return f"{failed}/{len(steps)}" + (f" ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})" if kinds else "")


def table(figure: dict) -> str:
    """One engine's markdown table: a row per framework and mode."""
    lines = ["| framework | server | in flight at the boundary | lost, median / p95 | tokens thrown away, median / p95 "
             "| boundary (ms), median / p95 | steps failed (by kind) | version the engine reports = the step's | aborted requests |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in figure["rows"]:
        steps = row["steps"]
        ran = [s for s in steps if "crash" not in s["failures"] or s["calls"]]
        named = sum(1 for s in ran if s.get("versions") and all(v == s.get("version") for v in s["versions"]))
        lines.append(f"| {row['framework']} | {row['mode']} | {_mp([s['in_flight'] for s in ran])} | {_mp([s['lost'] for s in ran])} "
                     f"| {_mp([s['thrown_tokens'] for s in ran])} | {_mp([s['boundary_ms'] for s in ran if s['boundary_ms'] is not None])} "
                     f"| {failure_counts(steps)} | {named}/{len(steps)} | {row['note']} |")
    return "\n".join(lines)


def first_failures(figure: dict) -> list[str]:
    """Each row's first failure of each kind, to name what failed."""
    out = []
    for row in figure["rows"]:
        seen = {}
        for s in row["steps"]:
            for kind, found in s["failures"].items():
                seen.setdefault(kind, found[0])
        wrong_start = sum(1 for s in row["steps"] if s.get("started_right") is False)
        if wrong_start:  # the harness's own check: the probe before the step gave other weights' output
            seen["start"] = f"{wrong_start} steps began on other weights than expected"
        if seen:
            out.append(f"- {row['framework']} ({row['mode']}): " + "; ".join(f"{k}: `{v}`" for k, v in seen.items()))
    return out


def main() -> None:
    """Measure the engines asked for; print the tables and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("sglang", "vllm", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=rounds_default(), help="steps per row (BENCH_ROUNDS, default 10)")
    args = parser.parse_args()
    stop_cleanly_on_sigterm()
    from .run import real_engine_lock

    engines = ("sglang", "vllm") if args.engine == "both" else (args.engine,)
    data = []
    for engine in engines:
        with real_engine_lock():
            data.append(run(engine, args.rounds))
    # One engine run alone keeps the other engine's figure from an earlier run.
    earlier = [f for f in read_json("step_boundary") or [] if f["engine"] not in engines]
    write_json("step_boundary", sorted(earlier + data, key=lambda f: f["engine"]))
    for figure in data:
        print(f"\n{figure['engine']} ({figure['seconds']} s)\n{table(figure)}\n" + "\n".join(first_failures(figure)))


if __name__ == "__main__":
    main()
