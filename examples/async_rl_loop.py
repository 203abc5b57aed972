"""An asynchronous RL loop on inference servers with the engine-plugins contract: copy it and put
your trainer and your weight load in.

The shape is the one RL frameworks run (AReaL, slime's and miles' partial rollouts, prime-rl):

- a **producer** keeps ``batch + oversample`` rollouts in flight, with long-tailed lengths; each
  finished rollout goes to a buffer and a new one starts in its place;
- at each **step boundary** (``batch`` rollouts in the buffer) the trainer takes them and makes the
  next checkpoint while generation goes on; the tail still in flight is not waited for;
- the **weight swap** goes through the contract's transaction (``fleet.weight_swap``): every
  server pauses (``keep``: the requests in flight stay where they are; ``abort``: they come back
  with their tokens and are sent again after the swap), the weights are loaded, and the commit
  bumps the version and resumes, once, on every server;
- a **probe** after each swap (a fixed greedy prompt) must give the trainer's own output for the
  new weights, from no KV computed before the swap: proof that the step generates with the
  weights its version claims.

Every rollout records the weight version of each of its tokens (``Rollout.token_versions``).

    async with Fleet(urls, api_key=key) as fleet:
        report = await run_loop(fleet, trainer, sglang_disk_load, LoopConfig(steps=8))
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional, Protocol

from engine_plugins.client import (
    Fleet,
    Rollout,
    ServerClient,
    ServerError,
    ServerFleet,
    run_rollout,
    tokens_per_version,
)

PROBE_TOKENS = 12
DRAIN_TIMEOUT_S = 300.0


@dataclass
class LoopConfig:
    """What the loop runs: how many steps, rollouts and tokens."""

    steps: int = 10
    batch: int = 16
    """Rollouts the trainer takes at each step."""
    oversample: int = 8
    """Rollouts in flight beyond the batch: the boundary does not wait for the slowest."""
    prompt_tokens: int = 24
    median_tokens: int = 80
    """Rollout lengths are log-normal around this, capped at ``max_tokens``: a long tail."""
    max_tokens: int = 640
    swap_mode: str = "keep"
    """``keep``: the rollouts in flight stay on the servers across the swap; ``abort``: they come
    back with their tokens and continue after it."""
    seed: int = 0
    probe_prompt_tokens: int = 600
    """Long enough that both engines cache it (vLLM caches whole blocks), so that KV reused from
    before a swap would show in ``cached_tokens``."""

    def lengths(self) -> Callable[[], int]:
        """A source of rollout lengths (``max_new_tokens``), seeded."""
        rng = random.Random(self.seed)
        return lambda: max(4, min(self.max_tokens, int(rng.lognormvariate(0.0, 0.8) * self.median_tokens)))

    def probe_ids(self) -> list[int]:
        """The probe's fixed prompt."""
        return random.Random(self.seed + 1).choices(range(3, 300), k=self.probe_prompt_tokens)


@dataclass
class Checkpoint:
    """A step's weights, where the servers can load them, and the trainer's own probe output."""

    step: int
    path: str
    probe_output: list[int]


class Trainer(Protocol):
    """The trainer side: the loop hands it each step's batch and gets the next checkpoint."""

    async def next_checkpoint(self, step: int, batch: list[Rollout]) -> Checkpoint:
        """Train on *batch* and return step *step*'s checkpoint."""
        ...


WeightLoad = Callable[[ServerClient, str], Awaitable[object]]
"""Loads the checkpoint at a path into one server (inside the swap, the server paused)."""


async def sglang_disk_load(server: ServerClient, path: str) -> object:
    """SGLang's ``/update_weights_from_disk``, with SGLang's defaults."""
    return await server.transport.call("POST", "/update_weights_from_disk", {"model_path": path}, timeout_s=300.0, idempotent=False)


async def vllm_disk_load(server: ServerClient, path: str) -> object:
    """vLLM's in-place reload of the workers' weights from a folder (``/collective_rpc``, which
    vLLM serves in dev mode; the plugin puts it behind the server's API key)."""
    body = {"method": "reload_weights", "kwargs": {"weights_path": path}}
    return await server.transport.call("POST", "/collective_rpc", body, timeout_s=300.0, idempotent=False)


@dataclass
class StepReport:
    """One step of the loop, as the demo's table shows it."""

    step: int
    version: str
    finished: int = 0
    """Rollouts that finished during the step (the batch and the surplus)."""
    kept: int = 0
    """Rollouts in flight when the swap began that stayed on their server (keep)."""
    kept_tokens: int = 0
    """Their tokens from before the swap, which an abort that throws partial rollouts away loses
    (counted once they finish)."""
    salvaged: int = 0
    """Rollouts aborted by the swap that came back with their tokens and went on (abort)."""
    salvaged_tokens: int = 0
    lost: int = 0
    """Rollouts given up, their tokens thrown away. Anything but 0 is a failure."""
    trainer_s: float = 0.0
    boundary_s: float = 0.0
    """From the swap's begin being sent to every server's commit answered."""
    batch_versions: dict[str, int] = field(default_factory=dict)
    """Tokens per weight version in the batch the trainer took."""
    probe_ok: Optional[bool] = None
    probe_cached_tokens: Optional[int] = None
    server_versions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain JSON-ready fields."""
        return dict(self.__dict__)


@dataclass
class LoopReport:
    """The whole run: each step, and every rollout the trainer took."""

    steps: list[StepReport]
    trained: list[Rollout]
    seconds: float
    tokens: int

    @property
    def problems(self) -> list[str]:
        """Everything that went wrong: a probe mismatch, a lost rollout, a split version."""
        return [f"step {s.step}: {p}" for s in self.steps for p in s.problems]


class Producer:
    """Keeps ``batch + oversample`` rollouts in flight and collects the finished ones."""

    def __init__(self, fleet: ServerFleet, config: LoopConfig, on_change: Callable[[], None]) -> None:
        self.fleet, self.config, self.on_change = fleet, config, on_change
        self.rng = random.Random(config.seed + 2)
        self.length = config.lengths()
        self.tasks: set[asyncio.Task] = set()
        self.running: set[int] = set()
        """The rollouts in flight (by ``id``)."""
        self.finished: list[Rollout] = []
        """Finished, not yet taken by the trainer."""
        self.finished_count = 0
        self.finished_at_last_swap = 0
        self.kept_by: dict[int, set[int]] = {}
        """Per step, the rollouts its swap kept (by ``id``)."""
        self.all_finished: list[Rollout] = []
        self.lost: list[Rollout] = []
        self.cancelled_at: dict[int, int] = {}
        """Rollouts cancelled by the current swap, with their tokens at the cancel."""
        self.ready = asyncio.Event()
        """Set while a batch is waiting in the buffer."""
        self.resumed = asyncio.Event()
        """Set while no swap is open: a rollout the swap aborted waits for it, then goes on."""
        self.resumed.set()
        self._count = 0
        self._stopping = False

    def start(self) -> None:
        """Fill the pipeline."""
        self._top_up()

    def _launch(self) -> None:
        rollout = Rollout([self.rng.randrange(3, 300) for _ in range(self.config.prompt_tokens)], self.length())
        servers = self.fleet.servers
        first = self._count % len(servers)  # spread the rollouts over the servers
        rid = f"rl-{self._count}"
        self._count += 1
        self.running.add(id(rollout))
        task = asyncio.create_task(run_rollout(
            rollout, servers[first:] + servers[:first], {"temperature": 1.0, "ignore_eos": True}, max_resubmits=8,
            resume_timeout_s=300.0, request_id=rid, resume_signal=self.resumed, on_attempt=self._on_attempt))
        task.add_done_callback(lambda t, r=rollout: self._done(r, t))
        self.tasks.add(task)

    def _on_attempt(self, rollout: Rollout, attempt) -> None:
        if attempt.cancelled and attempt.error is None:
            self.cancelled_at.setdefault(id(rollout), len(rollout.output_ids))

    def _done(self, rollout: Rollout, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        self.running.discard(id(rollout))
        if task.cancelled():
            return
        if task.exception() is not None or rollout.gave_up:
            self.lost.append(rollout)
        else:
            self.finished.append(rollout)
            self.all_finished.append(rollout)
            self.finished_count += 1
        if len(self.finished) >= self.config.batch:
            self.ready.set()
        self._top_up()
        self.on_change()

    def _top_up(self) -> None:
        # At most batch + oversample rollouts in flight and in the buffer: once a batch waits,
        # only the tail runs on (as frameworks over-sample one step's batch at a time).
        while not self._stopping and len(self.running) + len(self.finished) < self.config.batch + self.config.oversample:
            self._launch()

    def take_batch(self) -> list[Rollout]:
        """The oldest ``batch`` finished rollouts (the rest stay for the next step)."""
        batch, self.finished = self.finished[:self.config.batch], self.finished[self.config.batch:]
        if len(self.finished) < self.config.batch:
            self.ready.clear()
        self._top_up()
        return batch

    async def drain(self, timeout_s: float) -> None:
        """Start no more rollouts and let those in flight finish (the last swap's tail)."""
        self._stopping = True
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout_s)

    async def stop(self) -> None:
        """Stop generating: cancel the rollouts still in flight (the servers abort them)."""
        self._stopping = True
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def run_loop(fleet: ServerFleet, trainer: Trainer, load: WeightLoad, initial: Checkpoint, config: LoopConfig,
                   on_change: Callable[["LoopState"], None] = lambda state: None) -> LoopReport:
    """Run *config.steps* RL steps on *fleet*, whose servers have *initial* loaded; *on_change*
    sees the state after every event (for a live display). Raises :class:`ServerError` when a
    swap cannot begin, load or commit."""
    if config.swap_mode not in ("keep", "abort"):
        raise ValueError(f"swap_mode must be 'keep' or 'abort', not {config.swap_mode!r}")
    state = LoopState(config)
    producer = Producer(fleet, config, lambda: on_change(state))
    state.producer = producer
    probe_ids = config.probe_ids()
    first = StepReport(0, "step-0")
    _all_ok(await fleet.update_weight_version(first.version), "set the first version")
    await _check_versions(fleet, first)
    await _probe(fleet, probe_ids, initial, first)
    state.steps.append(first)
    started = time.monotonic()
    producer.start()
    try:
        for step in range(1, config.steps + 1):
            report = StepReport(step, f"step-{step}")
            state.current = report
            await producer.ready.wait()
            batch = producer.take_batch()
            report.batch_versions = tokens_per_version(batch)
            state.phase = "training"
            on_change(state)
            t = time.monotonic()
            checkpoint = await trainer.next_checkpoint(step, batch)  # the servers keep generating meanwhile
            report.trainer_s = time.monotonic() - t
            state.phase = "swapping"
            on_change(state)
            await _swap(fleet, load, checkpoint, report, producer, config.swap_mode)
            await _probe(fleet, probe_ids, checkpoint, report)
            state.phase = "generating"
            state.trained += batch
            state.steps.append(report)
            on_change(state)
        state.phase = "draining"
        on_change(state)
        await producer.drain(DRAIN_TIMEOUT_S)
    finally:
        await producer.stop()
    _count_kept_tokens(state.steps, producer)
    if producer.lost:
        state.steps[-1].problems.append(f"{len(producer.lost)} rollouts lost in all: " + "; ".join(
            f"{r.gave_up or 'an error'} after {len(r.output_ids)} tokens" for r in producer.lost[:3]))
    return LoopReport(state.steps, state.trained, time.monotonic() - started, sum(len(r.output_ids) for r in state.trained))


@dataclass
class LoopState:
    """What a live display shows while the loop runs."""

    config: LoopConfig
    producer: Optional[Producer] = None
    steps: list[StepReport] = field(default_factory=list)
    trained: list[Rollout] = field(default_factory=list)
    current: Optional[StepReport] = None
    phase: str = "generating"


async def _swap(fleet: ServerFleet, load: WeightLoad, checkpoint: Checkpoint, report: StepReport, producer: Producer, mode: str) -> None:
    """The swap to *checkpoint* through the contract's transaction, timed and counted."""
    in_flight = set(producer.running)
    finished_before, lost_before = producer.finished_count, len(producer.lost)
    producer.cancelled_at.clear()
    producer.resumed.clear()
    t = time.monotonic()
    async with fleet.weight_swap(report.version, mode=mode) as swap:
        _all_ok(swap.began, "begin the weight swap")
        # Paused now: a rollout still running is one the swap keeps on its server.
        kept = in_flight & producer.running if mode == "keep" else set()
        producer.kept_by[report.step] = kept
        loads = await asyncio.gather(*(load(s, checkpoint.path) for s in fleet.servers), return_exceptions=True)
        failed = [f"{s.url}: {x}" for s, x in zip(fleet.servers, loads) if isinstance(x, BaseException)]
        if failed:
            raise ServerError(fleet.servers[0].url, "http", "the weight load failed, the swap is left open: " + "; ".join(failed))
    _all_ok(swap.committed, "commit the weight swap")
    report.boundary_s = time.monotonic() - t
    producer.resumed.set()
    report.finished = finished_before - producer.finished_at_last_swap
    producer.finished_at_last_swap = finished_before
    report.kept = len(kept)
    report.salvaged = len(producer.cancelled_at)
    report.salvaged_tokens = sum(producer.cancelled_at.values())
    report.lost = len(producer.lost) - lost_before
    if report.lost:
        report.problems.append(f"{report.lost} rollouts lost at the swap")
    await _check_versions(fleet, report)


async def _check_versions(fleet: ServerFleet, report: StepReport) -> None:
    """Every server reports the step's version: one version, no split."""
    loads = await fleet.loads()
    report.server_versions = sorted({r.value.weight_version for r in loads.results if r.ok})
    if report.server_versions != [report.version] or not loads.ok:
        report.problems.append(f"the servers report versions {report.server_versions}, not {report.version}")


async def _probe(fleet: ServerFleet, probe_ids: list[int], checkpoint: Checkpoint, report: StepReport) -> None:
    """The probe on every server: the trainer's output for these weights, from no earlier KV."""
    params = {"max_new_tokens": PROBE_TOKENS, "temperature": 0.0, "ignore_eos": True}
    results = await asyncio.gather(*(s.partial_generate(probe_ids, params) for s in fleet.servers))
    report.probe_ok = all(list(r.output_ids) == checkpoint.probe_output for r in results)
    report.probe_cached_tokens = max(r.cached_tokens or 0 for r in results)
    if not report.probe_ok:
        report.problems.append(f"the probe gave {[list(r.output_ids) for r in results]}, the trainer's weights give {checkpoint.probe_output}")
    if report.probe_cached_tokens:
        report.problems.append(f"the probe reused {report.probe_cached_tokens} prompt tokens of KV computed before the swap")
    spans = {s.version for r in results for s in r.weight_versions}
    if spans != {report.version}:
        report.problems.append(f"the probe's tokens carry versions {sorted(spans)}, not {report.version}")


def _all_ok(result, what: str) -> None:
    if not result.ok:
        raise ServerError(result.failed[0].url, "http", f"could not {what}: " + "; ".join(f"{r.url}: {r.error}" for r in result.failed))


def _count_kept_tokens(steps: list[StepReport], producer: Producer) -> None:
    by_id = {id(r): r for r in producer.all_finished}
    for report in steps:
        older = {f"step-{k}" for k in range(report.step)}
        for key in producer.kept_by.get(report.step, ()):
            if key in by_id:
                report.kept_tokens += sum(1 for v in by_id[key].token_versions if v in older)
