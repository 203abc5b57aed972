"""The RL loop of ``examples/`` (the demo's): on the stub and on both real engines with real weights
made by its trainer at every step, the tail in flight is kept across each swap, nothing is lost,
every step's probe gives the trainer's own output for its weights, and a swap that loads nothing
is caught."""

from __future__ import annotations

import sys

import pytest

from engine_plugins.client import Fleet
from targets import REPO

from .helpers import engine_python

sys.path.insert(0, str(REPO / "examples"))
from async_rl_loop import Checkpoint, LoopConfig, run_loop, sglang_disk_load, vllm_disk_load  # noqa: E402
from rl_demo import SubprocessTrainer  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.targets("stub", "sglang-weights", "vllm-weights")]

LOADS = {"sglang-weights": sglang_disk_load, "vllm-weights": vllm_disk_load}


class StubTrainer:
    """The stub has no weights: its 'checkpoint' is a name, and its probe output the stub's own
    (greedy: the same for every step); *lie* makes the trainer claim another output."""

    def __init__(self, probe_output: list[int], lie: bool = False) -> None:
        self.probe_output = [t + 1 for t in probe_output] if lie else probe_output

    async def next_checkpoint(self, step, batch) -> Checkpoint:
        return Checkpoint(step, f"stub-step-{step}", self.probe_output)


async def no_load(server, path) -> None:
    """The stub loads nothing; on a real engine, a swap that forgets its weights."""


class Setup:
    """The loop's trainer, weight load and first checkpoint for *target*, and the way back to the
    target's own weights after the test."""

    def __init__(self, target, tmp_path, config: LoopConfig, lie: bool = False) -> None:
        self.target, self.tmp_path, self.config, self.lie = target, tmp_path, config, lie
        self.load = LOADS.get(target.name, no_load)
        self.trainer = None

    async def __aenter__(self):
        from tools.launcher.engine_server import engine_paths

        fleet = Fleet([self.target.url], api_key=self.target.api_key)
        self.fleet = await fleet.__aenter__()
        if self.target.name == "stub":
            params = {"max_new_tokens": 12, "temperature": 0.0, "ignore_eos": True}
            probe = await self.fleet.servers[0].partial_generate(self.config.probe_ids(), params)
            self.trainer = StubTrainer(list(probe.output_ids), self.lie)
            self.initial = await self.trainer.next_checkpoint(0, [])
            return self
        engine = self.target.name.split("-")[0]
        self.trainer = SubprocessTrainer(engine_python(engine), engine_paths(engine).model_dir, self.tmp_path / "ckpt",
                                         self.tmp_path / "trainer.log", seed=5)
        await self.trainer.start(self.config.probe_ids())
        self.initial = await self.trainer.next_checkpoint(0, [])
        await self.load(self.fleet.servers[0], self.initial.path)  # idle: the engine's own load
        return self

    async def __aexit__(self, *exc) -> None:
        if isinstance(self.trainer, SubprocessTrainer):
            await self.trainer.stop()
            await self.load(self.fleet.servers[0], str(self.target.checkpoints[0]))  # the target's A, for the next test
        await self.fleet.__aexit__(*exc)


async def test_the_loop_keeps_the_tail_across_every_swap_and_loses_nothing(target, tmp_path):
    config = LoopConfig(steps=3 if target.real else 5, seed=3)
    async with Setup(target, tmp_path, config) as setup:
        report = await run_loop(setup.fleet, setup.trainer, setup.load, setup.initial, config)
    assert report.problems == [], target.log_tail()
    steps = report.steps[1:]
    assert [s.version for s in steps] == [f"step-{k}" for k in range(1, config.steps + 1)]
    assert all(s.probe_ok and s.probe_cached_tokens == 0 and s.server_versions == [s.version] for s in report.steps)
    assert all(s.lost == 0 and s.salvaged == 0 for s in steps)
    assert sum(s.kept for s in steps) > 0 and sum(s.kept_tokens for s in steps) > 0
    assert len(report.trained) == config.batch * config.steps
    order = {f"step-{k}": k for k in range(config.steps + 1)}
    for rollout in report.trained:
        assert rollout.finish_reason == "length" and len(rollout.output_ids) == rollout.max_new_tokens
        numbers = [order[v] for v in rollout.token_versions]  # a KeyError is a version the loop never set
        assert numbers == sorted(numbers), rollout.version_spans()
    assert any(len(r.version_spans()) > 1 for r in report.trained), "no trained rollout was kept across a swap"


@pytest.mark.targets("stub")
async def test_in_abort_mode_the_tail_comes_back_with_its_tokens_and_goes_on(target, tmp_path):
    config = LoopConfig(steps=4, seed=4, swap_mode="abort")
    async with Setup(target, tmp_path, config) as setup:
        report = await run_loop(setup.fleet, setup.trainer, setup.load, setup.initial, config)
    assert report.problems == []
    steps = report.steps[1:]
    assert sum(s.salvaged for s in steps) > 0 and sum(s.salvaged_tokens for s in steps) > 0
    assert all(s.kept == 0 and s.lost == 0 for s in steps)
    for rollout in report.trained:
        assert rollout.finish_reason == "length" and len(rollout.output_ids) == rollout.max_new_tokens


async def test_a_step_whose_weights_are_not_the_trainers_fails_its_probe(target, tmp_path):
    # Real engines: the swap loads nothing, so the server keeps the last weights. The stub has
    # none: its trainer claims another output instead.
    config = LoopConfig(steps=1, seed=6)
    async with Setup(target, tmp_path, config, lie=not target.real) as setup:
        load = no_load if target.real else setup.load
        report = await run_loop(setup.fleet, setup.trainer, load, setup.initial, config)
    assert report.steps[-1].probe_ok is False
    assert any("the probe gave" in p for p in report.problems), report.problems
