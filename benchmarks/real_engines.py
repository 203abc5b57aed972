"""Figures 1 to 4 on a real engine (SGLang or vLLM on the CPU, the tiny model): the engine
without the plugin and with it, both servers up at once and the rounds alternating between
them, so that both see the same machine.

1. **abort to idle** with N requests running (N = 8, 32, 128, 512): the plugin's
   ``POST /abort_requests {"wait": true}``; the framework's own loop on the engine without the
   plugin (SGLang: slime's ``abort_server_until_idle``: abort all, poll ``/v1/loads``, sleep 3 s;
   vLLM: dev-mode ``POST /abort_requests {}``, then poll ``/metrics`` every 0.1 s until it shows
   no request); the same native loop on the engine with the plugin; and in each case the time
   until the last client had its answer. Each is also given as a multiple of the engine's decode
   step at that batch (N requests of ``STEP_TOKENS`` tokens, wall time / tokens). Counted: how
   often a loop declared idle while a client still had no answer, and how often its first poll
   still saw requests.
2. **tokens salvaged**: of the tokens the engine generated for the aborted requests (its
   Prometheus generation-token counter, before and after), the share the clients received.
3. **requests lost on a weight-version bump** with N requests running: the engine's own
   ``/update_weight_version`` with its default body on the engine without the plugin, the
   contract's on the engine with it; a request is lost if its answer is not a full generation.
4. **overhead**: generation throughput (N requests of ``THROUGHPUT_TOKENS`` tokens, tokens per
   second) with the plugin and without, alternating, ``OVERHEAD_PAIRS`` rounds per round of the
   other figures; and one short request's latency. Each round also reads the CPU time of the
   server's processes from ``/proc``: the API server's (where the plugin runs; the schedulers and
   engine cores run none of its code) and all of them, per generated token. On two shared cores
   a round's throughput varies by a quarter from one round to the next, so the ratio is the
   median of each round's plugin / no-plugin ratio, with a bootstrap 95% interval.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import time
from typing import Any, Optional

import httpx

from engine_plugins.client.loads import parse_vllm_metrics
from tools.launcher.engine_server import EngineServer, ensure_engine

from .common import cpu_seconds, group_processes, in_turn, stop_cleanly_on_sigterm, KEY, REPO, ms, progress, rounds_default, stats, write_json

PROMPT = [1, 15, 27, 33, 41]
LONG_TOKENS = 1500
STEP_TOKENS = 32
THROUGHPUT_TOKENS = 64
# Figure 4's rounds per round of the others: its effect is a few percent, its noise a quarter.
OVERHEAD_PAIRS = 3
SLIME_SLEEP_S = 3.0
VLLM_POLL_S = 0.1
COUNTS = (8, 32, 128, 512)
# Figure 10: figure 4 on the pinned SGLang (None) and on the releases the frameworks pin before
# 0.5.19 (slime's 0.5.15; verl's and NeMo-RL's 0.5.12), where the plugin labels the tokens itself
# and so has the scheduler send a non-streaming request's every token, not one output in 50.
SGLANG_RELEASES = (None, "0.5.15", "0.5.12")
# Connection pools for the generation requests (see Engine): 32 connections each at 512 in flight.
GENERATION_POOLS = 16

# --- the engines' own wire shapes ----------------------------------------------------


def num_requests_from_load(load: Any) -> int:
    """slime's ``server_control.py:12-29`` (THUDM/slime at 624b824a): the request count of a loads answer."""
    if isinstance(load, list):
        return sum(num_requests_from_load(item) for item in load)
    if not isinstance(load, dict):
        return 0
    if "loads" in load:
        return num_requests_from_load(load["loads"])
    for key in ("num_reqs", "num_total_reqs", "total_reqs"):
        value = load.get(key)
        if isinstance(value, int):
            return value
    running = load.get("num_running_reqs", load.get("total_running_reqs"))
    waiting = load.get("num_waiting_reqs", load.get("total_waiting_reqs"))
    return (running if isinstance(running, int) else 0) + (waiting if isinstance(waiting, int) else 0)


_COUNTER = re.compile(r"^(sglang|vllm):generation_tokens_total(?:\{[^}]*\})?\s+([0-9.eE+]+)", re.M)


class Engine:
    """One running server and how to talk to it natively and through the contract."""

    def __init__(self, engine: str, url: str, plugin: bool, pid: int) -> None:
        self.engine, self.url, self.plugin = engine, url, plugin
        self.pid = pid
        """The API server's process, the leader of the server's process group."""
        # Idle connections are dropped well before the servers' keep-alive (uvicorn: 5 s) closes
        # them, so that a call never goes out on a connection the server is closing.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=1.0)
        self.http = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=600, limits=limits)
        """The control calls (abort, loads, metrics)."""
        # The generations go through pools of their own, each of a few connections: httpx scans
        # every connection of a pool each time a response ends, so 512 answers arriving at once
        # on one pool cost this client about 5 s (512 x 512 scans), which would be counted as
        # the abort's time, and the abort's answer would wait behind them.
        # One TLS context for them all: httpx builds one per client otherwise (tens of ms of CPU each).
        tls = httpx.create_ssl_context()
        self._pools = [httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=600, limits=limits,
                                         verify=tls) for _ in range(GENERATION_POOLS)]
        self._next_pool = 0

    def generation_client(self) -> httpx.AsyncClient:
        """The client for one generation request: the pools in turn."""
        self._next_pool = (self._next_pool + 1) % len(self._pools)
        return self._pools[self._next_pool]

    async def close(self) -> None:
        """Close every client."""
        for client in (self.http, *self._pools):
            await client.aclose()

    async def native_request(self, max_tokens: int) -> dict:
        """One native generation (SGLang ``/generate``, vLLM ``/v1/completions``); its answer as
        ``{"tokens", "full"}``."""
        if self.engine == "sglang":
            r = await self.generation_client().post("/generate", json={"input_ids": PROMPT, "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True}})
            body = r.json() if r.status_code == 200 else {}
            meta = body.get("meta_info", {}) if isinstance(body, dict) else {}
            tokens = int(meta.get("completion_tokens", 0))
            return {"tokens": tokens, "full": tokens >= max_tokens and (meta.get("finish_reason") or {}).get("type") == "length"}
        r = await self.generation_client().post("/v1/completions", json={"model": self.model, "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": True})
        body = r.json() if r.status_code == 200 else {}
        tokens = int((body.get("usage") or {}).get("completion_tokens", 0)) if isinstance(body, dict) else 0
        choices = body.get("choices") or [{}] if isinstance(body, dict) else [{}]
        return {"tokens": tokens, "full": tokens >= max_tokens and choices[0].get("finish_reason") == "length"}

    async def contract_request(self, max_tokens: int) -> dict:
        """One ``/partial_generate``; ``{"tokens", "full"}``."""
        r = await self.generation_client().post("/partial_generate", json={"input_ids": PROMPT, "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True}})
        r.raise_for_status()
        body = r.json()
        return {"tokens": len(body["output_ids"]), "full": body["finish_reason"] == "length" and len(body["output_ids"]) >= max_tokens}

    async def setup(self) -> None:
        """Learn vLLM's model name."""
        if self.engine == "vllm":
            self.model = (await self.http.get("/v1/models")).json()["data"][0]["id"]

    async def release(self) -> str:
        """The engine's version, as its server reports it (SGLang ``/get_server_info``, vLLM ``/version``)."""
        path = "/get_server_info" if self.engine == "sglang" else "/version"
        return str((await self.http.get(path)).json()["version"])

    async def running(self) -> int:
        """Requests the engine itself counts (SGLang's ``/v1/loads``, vLLM's ``/metrics``)."""
        if self.engine == "sglang":
            return num_requests_from_load((await self.http.get("/v1/loads?include=core")).json())
        return parse_vllm_metrics((await self.http.get("/metrics")).text).total

    async def generated_tokens(self) -> float:
        """The engine's generation-token counter, summed over its labels."""
        text = (await self.http.get("/metrics")).text
        return sum(float(m.group(2)) for m in _COUNTER.finditer(text))

    async def native_loop(self) -> dict:
        """The framework's abort loop; ``{"first_poll_saw", "polls"}``."""
        first, polls = None, 0
        while True:
            if self.engine == "sglang":
                await self.http.post("/abort_request", json={"abort_all": True})
            elif polls == 0:
                await self.http.post("/abort_requests", json={})
            count = await self.running()
            polls += 1
            first = count if first is None else first
            if count <= 0:
                return {"first_poll_saw": first, "polls": polls}
            await asyncio.sleep(SLIME_SLEEP_S if self.engine == "sglang" else VLLM_POLL_S)

    async def plugin_abort(self) -> dict:
        """The contract's abort with wait."""
        r = await self.http.post("/abort_requests", json={"wait": True})
        r.raise_for_status()
        return r.json()

    async def fill(self, n: int, contract: bool, max_tokens: int = LONG_TOKENS) -> list[asyncio.Task]:
        """*n* long requests, returned once the engine runs them all."""
        make = self.contract_request if contract else self.native_request
        tasks = [asyncio.ensure_future(make(max_tokens)) for _ in range(n)]
        deadline = time.monotonic() + 300
        while await self.running() < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.engine}: {n} requests never all ran")
            done = [t for t in tasks if t.done() and t.exception()]
            if done:
                raise RuntimeError(f"{self.engine}: a request failed: {done[0].exception()!r}")
            await asyncio.sleep(0.02)
        return tasks


# --- figures ------------------------------------------------------------------------


async def decode_step_ms(e: Engine, n: int) -> float:
    """Wall time per token of *n* requests of STEP_TOKENS tokens run together."""
    start = time.perf_counter()
    await asyncio.gather(*[e.native_request(STEP_TOKENS) for _ in range(n)])
    return ms(time.perf_counter() - start) / STEP_TOKENS


async def abort_round(e: Engine, n: int, way: str) -> dict:
    """One abort-to-idle round: *way* is ``plugin`` (contract abort with wait) or ``native``."""
    contract = way == "plugin"
    tokens_before = await e.generated_tokens()
    tasks = await e.fill(n, contract)
    start = time.perf_counter()
    if contract:
        outcome = await e.plugin_abort()
        if not outcome.get("idle"):
            raise RuntimeError(f"{e.engine}: the plugin's abort with wait did not end idle: {outcome}")
        declared = {"first_poll_saw": None, "polls": 0}
    else:
        declared = await e.native_loop()
    idle_ms = ms(time.perf_counter() - start)
    still_running = sum(not t.done() for t in tasks)
    answers = await asyncio.gather(*tasks)
    last_ms = ms(time.perf_counter() - start)
    await asyncio.sleep(0.2)  # the counter is updated after the step that ends the requests
    generated = await e.generated_tokens() - tokens_before
    received = sum(a["tokens"] for a in answers)
    return {"declared_idle_ms": idle_ms, "last_answer_ms": last_ms, "clients_without_answer_at_idle": still_running,
            "first_poll_saw": declared["first_poll_saw"], "polls": declared["polls"],
            "generated_tokens": generated, "received_tokens": received}


async def bump_round(e: Engine, n: int) -> dict:
    """One weight-version bump with *n* requests running; how many were lost."""
    tasks = await e.fill(n, e.plugin, max_tokens=STEP_TOKENS * 4)
    version = f"v-{time.time_ns()}"
    # The same body on both: the engine's own route keeps its default (SGLang's aborts every
    # request, vLLM's never does); the contract's route keeps them all.
    (await e.http.post("/update_weight_version", json={"new_version": version})).raise_for_status()
    answers = await asyncio.gather(*tasks)
    return {"lost": sum(not a["full"] for a in answers), "requests": n}


async def throughput_round(e: Engine, n: int) -> dict:
    """Tokens per second of *n* native requests of THROUGHPUT_TOKENS, one short request's latency,
    and the CPU milliseconds the API server's process and all the server's processes spent on
    them."""
    processes = group_processes(e.pid)
    api_cpu, all_cpu = cpu_seconds(e.pid), sum(map(cpu_seconds, processes))
    start = time.perf_counter()
    answers = await asyncio.gather(*[e.native_request(THROUGHPUT_TOKENS) for _ in range(n)])
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    await e.native_request(1)
    short_ms = ms(time.perf_counter() - start)
    tokens = sum(a["tokens"] for a in answers)
    return {"tokens_per_s": tokens / seconds, "short_ms": short_ms, "tokens": tokens + 1, "requests": n + 1,
            "api_cpu_ms": ms(cpu_seconds(e.pid) - api_cpu), "all_cpu_ms": ms(sum(map(cpu_seconds, processes)) - all_cpu)}


async def measure(engine: str, native: Engine, plugin: Engine, rounds: int, counts: tuple[int, ...], figures: set[int]) -> dict:
    """Every figure asked for, the rounds alternating between the two servers."""
    out: dict[str, Any] = {"engine": engine, "release": await native.release(), "rounds": rounds, "counts": list(counts),
                           "abort": {}, "bump": {}, "overhead": {}}
    for e in (native, plugin):
        await e.setup()
        # A warm-up, not counted; an abort round's needs the engine's own load counts, which an
        # SGLang before 0.5.19 has no route for without the plugin.
        if figures & {1, 2, 3}:
            await abort_round(e, 2, "plugin" if e is plugin else "native")
        else:
            await throughput_round(e, 2)
    if figures & {1, 2}:
        for n in counts:
            steps = []
            rows: dict[str, list[dict]] = {"plugin abort with wait": [], "native loop, no plugin": [], "native loop, with plugin": []}
            for i in range(rounds):
                steps.append(await decode_step_ms(native if i % 2 else plugin, n))
                rows["native loop, no plugin"].append(await abort_round(native, n, "native"))
                rows["plugin abort with wait"].append(await abort_round(plugin, n, "plugin"))
                rows["native loop, with plugin"].append(await abort_round(plugin, n, "native"))
                progress(f"{engine} figure 1/2: {n} in flight, round {i + 1}/{rounds}: plugin "
                         f"{rows['plugin abort with wait'][-1]['declared_idle_ms']:.0f} ms, native "
                         f"{rows['native loop, no plugin'][-1]['declared_idle_ms']:.0f} ms, step {steps[-1]:.1f} ms")
            out["abort"][str(n)] = {"decode_step_ms": steps, "ways": rows}
    if 3 in figures:
        n = counts[len(counts) // 2]
        for e, name in ((native, "native default"), (plugin, "plugin")):
            out["bump"][name] = []
        for i in range(rounds):
            out["bump"]["native default"].append(await bump_round(native, n))
            out["bump"]["plugin"].append(await bump_round(plugin, n))
        progress(f"{engine} figure 3: lost {sum(r['lost'] for r in out['bump']['native default'])} native, "
                 f"{sum(r['lost'] for r in out['bump']['plugin'])} plugin")
    if 4 in figures:
        n = counts[len(counts) // 2]
        out["overhead"] = {"requests": n, "native": [], "plugin": []}
        for i in range(rounds * OVERHEAD_PAIRS):
            for e, name in in_turn(((native, "native"), (plugin, "plugin")), i):
                out["overhead"][name].append(await throughput_round(e, n))
        progress(f"{engine} figure 4: done")
    return out


@contextlib.contextmanager
def servers(engine: str, version: Optional[str] = None):
    """The engine without the plugin and with it, both up (their :class:`EngineServer`); fails
    loudly (the log tail) if either cannot start. *version*: another supported release than the
    pinned one."""
    native_env = {"SGLANG_PLUGINS": "no_such_plugin"} if engine == "sglang" else {"VLLM_PLUGINS": "no_such_plugin", "VLLM_SERVER_DEV_MODE": "1"}
    plugin_env = {} if engine == "sglang" else {"VLLM_PLUGINS": "engine_plugins"}
    extra = ["--enable-metrics"] if engine == "sglang" else []
    progress(f"starting {engine} {version or '(pinned)'} without the plugin and with it")
    with EngineServer(engine, REPO, api_key=KEY, env=native_env, extra_args=extra, version=version) as a, \
            EngineServer(engine, REPO, api_key=KEY, env=plugin_env, extra_args=extra, version=version) as b:
        progress(f"{engine} servers up: {a.url} (no plugin), {b.url} (plugin)")
        yield a, b


def run(engine: str, rounds: int, counts: tuple[int, ...], figures: set[int], version: Optional[str] = None) -> dict:
    """Figures 1-4 on *engine* (the pinned release, or *version*); the raw data."""
    ensure_engine(engine, REPO, version=version)
    with servers(engine, version) as (native_server, plugin_server):
        async def go() -> dict:
            native = Engine(engine, native_server.url, False, native_server.process.pid)
            plugin = Engine(engine, plugin_server.url, True, plugin_server.process.pid)
            try:
                return await measure(engine, native, plugin, rounds, counts, figures)
            finally:
                await native.close()
                await plugin.close()
        return asyncio.run(go())


def releases(rounds: int) -> list[dict]:
    """Figure 10: figure 4 on each of SGLANG_RELEASES in turn (each with its two servers up at
    once, the rounds alternating); the raw data, one entry per release."""
    return [run("sglang", rounds, COUNTS, {4}, version) for version in SGLANG_RELEASES]


def main() -> None:
    """Figures 1-4 on one engine; writes ``benchmarks/results/real_<engine>.json`` (the pinned
    release; another one's go to ``real_<engine>-<version>.json``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("engine", choices=["sglang", "vllm"])
    parser.add_argument("--rounds", type=int, default=rounds_default())
    parser.add_argument("--counts", type=int, nargs="+", default=list(COUNTS))
    parser.add_argument("--figures", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--version", help="another supported release than the pinned one (its venv is built if needed)")
    args = parser.parse_args()
    stop_cleanly_on_sigterm()
    data = run(args.engine, args.rounds, tuple(args.counts), set(args.figures), args.version)
    write_json(f"real_{args.engine}" + (f"-{args.version}" if args.version else ""), data)


if __name__ == "__main__":
    main()
