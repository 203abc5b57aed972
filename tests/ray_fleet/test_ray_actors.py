"""Engines held in-process by real Ray actors, driven with ``Fleet([handle1, handle2])``: the
driver (:mod:`ray_fleet.driver`) runs in an engine's interpreter, which has Ray on its path (the
dev venv has none), and reports in JSON what it checked.

- stub engines in two actors (one by the mixin, one by ``with_contract``): every handle named by
  its actor, detection, the partial-rollout scenario across a version-only swap, and a killed
  actor reported ``unreachable`` while the other answers;
- a real vLLM (AsyncLLM) and a real SGLang (Engine) in an actor each: the scenario with the
  weights reloaded by the engine's own in-place load from a second checkpoint. These need the
  engines' in-process adapters (``engine_plugins.engines.<engine>.inprocess``) and skip, saying
  so, while an engine's is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ray_fleet.scenario import SIZES
from targets import REPO, launch_code_path, make_checkpoints

pytestmark = pytest.mark.real

# The engine venv whose interpreter runs the stub's driver: any with Ray's dependencies will do.
STUB_INTERPRETER = "vllm"


def run_driver(tmp_path: Path, interpreter: str, *args: str, timeout_s: float) -> dict:
    """``python -m ray_fleet.driver *args`` in *interpreter*'s engine venv with Ray on its path;
    its report, after checking it ran clean."""
    from tools.launcher.engine_server import EngineServer, ensure_engine

    paths = ensure_engine(interpreter, REPO, ray=True)
    # The engine server's environment (this checkout's plugin first on the path, the CPU
    # settings), with tests/ (the driver), examples/ (the actors) and Ray after it.
    code_path = os.pathsep.join([launch_code_path(ray=True), str(REPO / "examples")])
    env = EngineServer(interpreter, REPO, env={"PYTHONPATH": code_path}).environment()
    out = tmp_path / "report.json"
    done = subprocess.run([str(paths.python), "-m", "ray_fleet.driver", *args, "--out", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    report = json.loads(out.read_text()) if out.exists() else {"problems": ["no report written"]}
    assert done.returncode == 0 and report["problems"] == [], (
        f"{json.dumps(report['problems'], indent=1)}\n--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-6000:]}")
    return report


def test_stub_engines_in_ray_actors_through_one_fleet(tmp_path):
    report = run_driver(tmp_path, STUB_INTERPRETER, "--engine", "stub", "--actors", "2", timeout_s=300)
    assert report["names"] == ["ray://stub-0", "ray://stub-1"]
    rollouts = report["scenario"]["rollouts"]
    assert len(rollouts) == 6 and all(r["tokens_at_cancel"] >= 1 and r["tokens"] == 200 for r in rollouts)
    assert [r["kind"] for r in report["after_kill"]["servers"]] == [None, "unreachable"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_real_engine_in_a_ray_actor_keeps_every_token_across_a_weight_swap(tmp_path, engine):
    from tools.launcher.engine_server import ensure_engine

    paths = ensure_engine(engine, REPO, ray=True)
    first, second = make_checkpoints(paths.python, paths.model_dir)
    report = run_driver(tmp_path, engine, "--engine", engine, "--model", str(first), "--load-format", "auto",
                        "--reload-from", str(second), timeout_s=900)
    scenario = report["scenario"]
    assert all(what.startswith(("vLLM's reload_weights", "SGLang's update_weights_from_disk")) for what in scenario["load"])
    tokens = SIZES[engine][1]
    assert all(r["tokens"] == tokens and r["spans"][-1]["version"] == "scenario-v2" for r in scenario["rollouts"]), scenario
