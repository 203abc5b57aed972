"""Figure 8: the prefix cache with the scoping by weight version on and off, on a real engine.

Two servers of one engine, both with the plugin, one with ``ENGINE_PLUGINS_SCOPE_PREFIX_CACHE=0``,
both up at once and the rounds alternating between them. A round is one weight version: a bump,
then rollouts as an RL step sends them (``GROUPS`` prompts sharing a system prefix, each sent
``SAMPLES`` times, as GRPO samples a group), then one prompt of the previous round sent again.
Every count is the engine's own (``cached_tokens`` of ``/partial_generate``):

- **hit rate within a version**: cached tokens over prompt tokens of the round's own rollouts.
  The scoping should lose nothing here.
- **tokens reused from before the bump**: the previous round's prompt sent again. That is KV
  computed under the old weights: unscoped, the engine reuses it; scoped, none.

    .venv/bin/python -m benchmarks.prefix_cache --engine vllm --rounds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics

import httpx

from tools.launcher.engine_server import EngineServer, ensure_engine

from .common import REPO, in_turn, progress, write_json

KEY = "prefix-cache-key"
GROUPS, SAMPLES = 4, 4
SYSTEM_TOKENS, PROMPT_TOKENS = 256, 640
WAYS = ("scoped", "unscoped")


def prompts(rng: random.Random) -> list[list[int]]:
    """One round's prompts: a system prefix they share, then a question of their own."""
    system = [rng.randrange(5, 250) for _ in range(SYSTEM_TOKENS)]
    return [system + [rng.randrange(5, 250) for _ in range(PROMPT_TOKENS - SYSTEM_TOKENS)] for _ in range(GROUPS)]


async def cached(http: httpx.AsyncClient, prompt: list[int]) -> int:
    """The engine's count of cached prompt tokens for one short rollout of *prompt*."""
    response = await http.post("/partial_generate", json={"input_ids": prompt, "sampling_params": {"max_new_tokens": 4}})
    response.raise_for_status()
    return response.json()["cached_tokens"]


async def one_round(http: httpx.AsyncClient, round_index: int, previous: list[int]) -> dict:
    """A bump, the round's rollouts, then *previous* (a prompt of the last round) again."""
    response = await http.post("/update_weight_version", json={"new_version": f"round-{round_index}"})
    response.raise_for_status()
    own = prompts(random.Random(round_index))
    hits = [await cached(http, prompt) for prompt in own for _ in range(SAMPLES)]
    stale = await cached(http, previous) if previous else 0
    return {"hit_tokens": sum(hits), "prompt_tokens": PROMPT_TOKENS * len(hits), "stale_tokens": stale, "last_prompt": own[-1]}


async def measure(urls: dict[str, str], rounds: int) -> dict[str, list[dict]]:
    """Every round on each server, the order alternating; the same prompts on both."""
    results: dict[str, list[dict]] = {way: [] for way in urls}
    clients = {way: httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300) for way, url in urls.items()}
    try:
        previous: dict[str, list[int]] = {way: [] for way in urls}
        for i in range(rounds):
            for way in in_turn(list(urls), i):
                result = await one_round(clients[way], i, previous[way])
                previous[way] = result.pop("last_prompt")
                results[way].append(result)
            progress(f"  round {i + 1}/{rounds}: " + ", ".join(
                f"{way} {results[way][-1]['hit_tokens'] / results[way][-1]['prompt_tokens']:.1%} hit, "
                f"{results[way][-1]['stale_tokens']} stale" for way in urls))
    finally:
        for client in clients.values():
            await client.aclose()
    return results


def run(engine: str, rounds: int) -> dict:
    """Figure 8 on *engine*: the raw figures per round, scoped and unscoped."""
    ensure_engine(engine, REPO)
    base_env = {} if engine == "sglang" else {"VLLM_PLUGINS": "engine_plugins"}
    with contextlib.ExitStack() as stack:
        urls = {}
        for way in WAYS:
            env = dict(base_env, **({"ENGINE_PLUGINS_SCOPE_PREFIX_CACHE": "0"} if way == "unscoped" else {}))
            urls[way] = stack.enter_context(EngineServer(engine, REPO, api_key=KEY, env=env)).url
        progress(f"{engine}: scoped at {urls['scoped']}, unscoped at {urls['unscoped']}")
        results = asyncio.run(measure(urls, rounds))
    return {"engine": engine, "rounds": rounds, "groups": GROUPS, "samples": SAMPLES, "prompt_tokens": PROMPT_TOKENS,
            "system_tokens": SYSTEM_TOKENS, "runs": results}


def table(data: list[dict]) -> str:
    """The markdown table: per engine and way, the hit rate within a version and the stale reuse."""
    rows = ["| engine | prefix cache | hit rate within a version, median over rounds (all rounds) "
            "| tokens reused from before the bump, per round (median) |", "|---|---|---|---|"]
    for figure in data:
        for way, per_round in figure["runs"].items():
            rates = [r["hit_tokens"] / r["prompt_tokens"] for r in per_round]
            overall = sum(r["hit_tokens"] for r in per_round) / sum(r["prompt_tokens"] for r in per_round)
            stale = [r["stale_tokens"] for r in per_round[1:]]
            rows.append(f"| {figure['engine']} | {way} | {statistics.median(rates):.1%} ({overall:.1%}) "
                        f"| {statistics.median(stale) if stale else 0:.0f} of {figure['prompt_tokens']} |")
    return "\n".join(rows)


def main() -> None:
    """Measure both ways on the engines asked for; print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("sglang", "vllm", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    engines = ("sglang", "vllm") if args.engine == "both" else (args.engine,)
    data = [run(engine, args.rounds) for engine in engines]
    write_json("prefix_cache", data)
    print(table(data))


if __name__ == "__main__":
    main()
