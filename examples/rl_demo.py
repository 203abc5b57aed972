"""``make demo``: the asynchronous RL loop of ``async_rl_loop.py`` on one real engine with the
plugin, its trainer making real weights at every step.

    .venv/bin/python examples/rl_demo.py --engine vllm|sglang [--steps 8] [--swap-mode keep|abort] [--deploy http|ray]

Starts the engine's server (its virtualenv and tiny model are made the first time) on the trainer's
step-0 checkpoint, runs the loop with a live display, then prints the per-step table, writes
``demo-results/rl_loop_<engine>.json`` and ``.png``, and exits 1 when a probe gave other weights'
output, a rollout was lost or the servers' versions split.

``--deploy ray`` (``make demo DEPLOY=ray``): the engine held in-process by a Ray actor instead of
an HTTP server, the loop driving it through ``Fleet([actor_handle])`` (``ray_deploy.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from engine_plugins.client import Fleet, Rollout, ServerError
from tools.launcher.cpu import selected_profile
from tools.launcher.engine_server import EngineServer, EngineSetupError, EngineStartError, ensure_engine

from async_rl_loop import PROBE_TOKENS, Checkpoint, LoopConfig, LoopReport, LoopState, StepReport, run_loop, sglang_disk_load, vllm_disk_load

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LOADS = {"sglang": sglang_disk_load, "vllm": vllm_disk_load}
console = Console(stderr=True, width=None if sys.stderr.isatty() else 150)


class SubprocessTrainer:
    """``tiny_trainer.py`` in the engine's Python (it has torch), one JSON line per request."""

    def __init__(self, python: Path, base_model: Path, work: Path, log: Path, seed: int) -> None:
        self.command = [str(python), str(HERE / "tiny_trainer.py"), str(base_model), str(work), "--seed", str(seed)]
        self.log = log
        self.process: Optional[asyncio.subprocess.Process] = None

    async def start(self, probe_ids: list[int]) -> None:
        """Start the trainer and hand it the probe."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        with open(self.log, "ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log, env=env)
        await self._ask({"probe_ids": probe_ids, "probe_tokens": PROBE_TOKENS})

    async def next_checkpoint(self, step: int, batch: list[Rollout]) -> Checkpoint:
        """Step *step*'s checkpoint (the batch is not used: see ``tiny_trainer.py``)."""
        answer = await self._ask({"step": step})
        return Checkpoint(step, answer["path"], answer["probe_output"])

    async def _ask(self, request: dict) -> dict:
        assert self.process and self.process.stdin and self.process.stdout
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        await self.process.stdin.drain()
        line = await self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the trainer exited ({self.log} has its output)")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the trainer failed: {answer['error']}")
        return answer

    async def stop(self) -> None:
        """Close its stdin: it exits."""
        if self.process and self.process.returncode is None:
            self.process.stdin.close()
            await self.process.wait()


def live_view(state: LoopState) -> Group:
    """The live display: the pipeline now, and the steps so far."""
    p = state.producer
    head = Table.grid(padding=(0, 2))
    current = state.current.step if state.current else 0
    head.add_row(f"step {current}/{state.config.steps}", state.phase,
                 f"in flight {len(p.running) if p else 0}", f"buffer {len(p.finished) if p else 0}/{state.config.batch}",
                 f"lost {len(p.lost) if p else 0}")
    return Group(head, step_table(state.steps, state.config))


def step_table(steps: list[StepReport], config: LoopConfig) -> Table:
    """One row per step: what the table of the demo and docs/demo.md show."""
    table = Table(title=f"{config.steps} steps, batch {config.batch} + {config.oversample} in flight, swap mode {config.swap_mode}")
    for name in ("step", "finished", "kept (their tokens)", "aborted, salvaged", "lost", "trainer ms", "swap ms",
                 "the batch's tokens by version", "probe", "cached"):
        table.add_column(name, justify="left" if name.startswith("version") else "right")
    for s in steps:
        probe = "-" if s.probe_ok is None else ("ok" if s.probe_ok else "WRONG")
        table.add_row(str(s.step), str(s.finished), f"{s.kept} ({s.kept_tokens})", f"{s.salvaged} ({s.salvaged_tokens})", str(s.lost),
                      f"{s.trainer_s * 1000:.0f}", f"{s.boundary_s * 1000:.0f}", version_mix(s.batch_versions), probe,
                      str(s.probe_cached_tokens))
    return table


def version_mix(counts: dict[str, int]) -> str:
    """``step-3 71%, step-2 27%, older 2%``: the newest first."""
    total = sum(counts.values())
    if not total:
        return "-"
    ordered = sorted(counts.items(), key=lambda kv: -_number(kv[0]))
    shown = [f"{v} {100 * n / total:.0f}%" for v, n in ordered[:2]]
    older = sum(n for _, n in ordered[2:])
    return ", ".join(shown + ([f"older {100 * older / total:.0f}%"] if older else []))


def _number(version: str) -> int:
    tail = version.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def plot(report: LoopReport, engine: str, path: Path) -> None:
    """Per step: the batch's tokens by how many versions old they are, and the boundary time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s for s in report.steps if s.step > 0]
    fig, (mix, boundary) = plt.subplots(1, 2, figsize=(11, 4))
    bottoms = [0] * len(steps)
    for lag, label in ((0, "the latest weights"), (1, "1 version older"), (2, "2+ versions older")):
        values = [sum(n for v, n in s.batch_versions.items() if min(_lag(s.step, v), 2) == lag) for s in steps]
        mix.bar([s.step for s in steps], values, bottom=bottoms, label=label)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    mix.set(title="the batch's tokens, by the weights that generated them", xlabel="step", ylabel="tokens")
    mix.legend()
    boundary.bar([s.step for s in steps], [s.boundary_s * 1000 for s in steps], color="tab:gray")
    for s in steps:
        boundary.annotate(f"{s.kept} kept", (s.step, s.boundary_s * 1000), ha="center", va="bottom", fontsize=8)
    boundary.set(title="the swap: begin sent to commit answered", xlabel="step", ylabel="ms")
    fig.suptitle(f"async RL loop on {engine} with engine-plugins")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _lag(step: int, version: str) -> int:
    # The batch of step k was generated while step k-1's weights were the latest.
    number = _number(version)
    return step - 1 - number if number >= 0 else 2


async def demo(engine: str, config: LoopConfig, out: Path) -> int:
    """Set up, run the loop, report; the exit code."""
    console.print(f"preparing {engine} (its virtualenv and a tiny model; minutes the first time) ...")
    paths = ensure_engine(engine, REPO)
    selected_profile()[1].place_client()  # the loop and its trainer run where clients go
    work = Path(tempfile.mkdtemp(prefix="rl-demo-"))
    trainer = SubprocessTrainer(paths.python, paths.model_dir, work, out / f"trainer_{engine}.log", config.seed)
    key = secrets.token_hex(12)
    try:
        await trainer.start(config.probe_ids())
        initial = await trainer.next_checkpoint(0, [])
        env = {"VLLM_SERVER_DEV_MODE": "1"} if engine == "vllm" else {}  # vLLM serves /collective_rpc in dev mode only
        server = EngineServer(engine, REPO, api_key=key, env=env, extra_args=["--load-format", "auto"],
                              model_dir=Path(initial.path), log_path=out / f"server_{engine}.log")
        console.print(f"starting a real {engine} server with the plugin on the trainer's step-0 weights ...")
        with server:
            console.print(f"{engine} up at {server.url} after {server.startup_seconds:.0f} s (log {server.log_path})")
            async with Fleet([server.url], api_key=key) as fleet:
                with Live(console=console, refresh_per_second=4, transient=True) as live:
                    report = await run_loop(fleet, trainer, LOADS[engine], initial, config,
                                            on_change=lambda state: live.update(live_view(state)))
    finally:
        await trainer.stop()
        shutil.rmtree(work, ignore_errors=True)
    return finish(report, engine, config, out)


async def demo_in_ray(engine: str, config: LoopConfig, out: Path) -> LoopReport:
    """The loop against *engine* held in-process by a Ray actor (run in the engine's interpreter,
    with Ray): the same trainer, the fleet made of the actor's handle, the engine's own reload."""
    from ray_deploy import engine_actors, ray_load

    paths = ensure_engine(engine, REPO)
    selected_profile()[1].place_client()
    work = Path(tempfile.mkdtemp(prefix="rl-demo-"))
    trainer = SubprocessTrainer(paths.python, paths.model_dir, work, out / f"trainer_{engine}.log", config.seed)
    try:
        await trainer.start(config.probe_ids())
        initial = await trainer.next_checkpoint(0, [])
        console.print(f"starting {engine} in a Ray actor (ContractActor) on the trainer's step-0 weights ...")
        async with engine_actors(engine, initial.path) as handles:
            async with Fleet(handles) as fleet:
                console.print(f"{engine} up in {', '.join(s.url for s in fleet.servers)}")
                with Live(console=console, refresh_per_second=4, transient=True) as live:
                    return await run_loop(fleet, trainer, ray_load, initial, config,
                                          on_change=lambda state: live.update(live_view(state)))
    finally:
        await trainer.stop()
        shutil.rmtree(work, ignore_errors=True)


def finish(report: LoopReport, engine: str, config: LoopConfig, out: Path) -> int:
    """Print the table and the verdict, write the JSON and the plot; the exit code."""
    out_console = Console(width=None if sys.stdout.isatty() else 150)
    out_console.print(step_table(report.steps, config))
    steps = [s for s in report.steps if s.step > 0]
    kept, kept_tokens = sum(s.kept for s in steps), sum(s.kept_tokens for s in steps)
    out_console.print(f"{len(report.trained)} rollouts trained on ({report.tokens} tokens) in {report.seconds:.1f} s; "
                      f"{kept} kept across {len(steps)} swaps with {kept_tokens} tokens generated before them, "
                      f"{sum(s.salvaged for s in steps)} aborted and continued, "
                      f"{sum(s.lost for s in steps)} lost; boundary median "
                      f"{sorted(s.boundary_s for s in steps)[len(steps) // 2] * 1000:.0f} ms")
    data = {"engine": engine, "config": config.__dict__, "seconds": report.seconds, "tokens": report.tokens,
            "steps": [s.to_dict() for s in report.steps],
            "rollouts": [r.to_dict() for r in report.trained]}
    (out / f"rl_loop_{engine}.json").write_text(json.dumps(data, indent=1))
    plot(report, engine, out / f"rl_loop_{engine}.png")
    out_console.print(f"wrote {out / f'rl_loop_{engine}.json'} and {out / f'rl_loop_{engine}.png'}")
    if report.problems:
        out_console.print("[bold red]FAILED[/]: " + "; ".join(report.problems))
        return 1
    out_console.print("[bold green]ok[/]: every probe gave the trainer's own output for its step, from no KV of "
                      "before the swap; no rollout lost; one version on every server")
    return 0


def ray_demo(args: argparse.Namespace, config: LoopConfig) -> int:
    """``--deploy ray``: the loop in the engine's interpreter (it has Ray), then the report here."""
    from ray_deploy import rerun_in_engine

    with tempfile.TemporaryDirectory(prefix="rl-demo-ray-") as tmp:
        report_to = Path(tmp) / "report.pickle"
        argv = ["--engine", args.engine, "--steps", str(args.steps), "--swap-mode", args.swap_mode, "--out", str(args.out),
                "--deploy", "ray", "--report-to", str(report_to)]
        if rerun_in_engine(args.engine, argv) != 0 or not report_to.exists():
            raise RuntimeError("the loop against the engine in a Ray actor failed (its output is above)")
        report = pickle.loads(report_to.read_bytes())
    return finish(report, f"{args.engine}-ray", config, args.out)


def main() -> None:
    """Command line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(LOADS), default="vllm")
    parser.add_argument("--steps", type=int, default=LoopConfig.steps)
    parser.add_argument("--swap-mode", choices=("keep", "abort"), default=LoopConfig.swap_mode)
    parser.add_argument("--out", type=Path, default=REPO / "demo-results")
    parser.add_argument("--deploy", choices=("http", "ray"), default="http",
                        help="http: the engine's server; ray: the engine held in-process by a Ray actor")
    # Internal: --deploy ray's run in the engine's interpreter hands its report back here.
    parser.add_argument("--report-to", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    config = LoopConfig(steps=args.steps, swap_mode=args.swap_mode)
    started = time.monotonic()
    try:
        if args.deploy == "ray" and args.report_to is not None:
            # In the engine's interpreter: run the loop, hand the report to the run that started this one.
            args.report_to.write_bytes(pickle.dumps(asyncio.run(demo_in_ray(args.engine, config, args.out))))
            sys.exit(0)
        code = ray_demo(args, config) if args.deploy == "ray" else asyncio.run(demo(args.engine, config, args.out))
    except (EngineSetupError, EngineStartError, ServerError, RuntimeError) as exc:
        console.print(f"[bold red]demo failed[/]: {exc}")
        code = 1
    console.print(f"demo took {time.monotonic() - started:.0f} s")
    sys.exit(code)


if __name__ == "__main__":
    main()
