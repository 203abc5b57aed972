"""TRL's default colocate mode (a synchronous ``vllm.LLM`` with ``external_launcher`` in the
trainer's process, weights loaded straight into the model, then ``reset_prefix_cache()``) on a
real vLLM with the plugin loaded: the sequence runs unchanged, the load lands, and a prompt sent
after it reuses no KV computed with the old weights. The driver, with TRL's lines, is
trl_colocate.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from targets import REPO, make_checkpoints

DRIVER = Path(__file__).with_name("trl_colocate.py")
# One vLLM start (about 20-30 s on two shared cores), a load, five short greedy requests.
DRIVER_TIMEOUT_S = 600


def run_driver(tmp_path: Path, *args: str, name: str = "driver") -> dict:
    """The driver in the pinned vLLM's interpreter, the checkout's plugin on its path and
    ``VLLM_PLUGINS=engine_plugins`` (the launcher's environment for vLLM): its result."""
    from tools.launcher.engine_server import EngineServer, ensure_engine

    paths = ensure_engine("vllm", REPO)
    log = tmp_path / f"{name}.log"
    server = EngineServer("vllm", REPO, log_path=log)
    with open(log, "wb") as out:
        done = subprocess.run([str(paths.python), str(DRIVER), *args], cwd=REPO, env=server.environment(),
                              stdout=out, stderr=subprocess.STDOUT, timeout=DRIVER_TIMEOUT_S,
                              preexec_fn=server.cpu_profile.place_engine)
    text = log.read_text(errors="replace")
    results = [line for line in text.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and results, text[-5000:]
    return json.loads(results[-1][len("RESULT "):])


def checkpoints() -> tuple[Path, Path]:
    from tools.launcher.engine_server import ensure_engine

    paths = ensure_engine("vllm", REPO)
    return make_checkpoints(paths.python, paths.model_dir)


@pytest.mark.real
def test_trls_colocate_sequence_runs_unchanged_and_its_load_lands(tmp_path):
    first, second = checkpoints()
    seen = run_driver(tmp_path, "--model", str(first), "--load", str(second))
    # The plugin loaded in the trainer's process (vLLM's general plugins), and the LLM is TRL's:
    # external_launcher, the model in this process (the driver reached it by TRL's path).
    assert "engine_plugins" in seen["general_plugins"], seen
    assert seen["executor"] == "ExecutorWithExternalLauncher", seen
    # The prefix cache works: the prompt sent twice before the load reuses its whole blocks.
    assert seen["first"]["cached"] == 0 and seen["again"]["cached"] > 0, seen
    assert seen["again"]["tokens"] == seen["first"]["tokens"], seen
    # The load landed: the greedy output changed, and stays the same on the new weights.
    assert seen["loaded_tensors"] > 0 and seen["after"]["tokens"] != seen["first"]["tokens"], seen
    assert seen["after_again"]["tokens"] == seen["after"]["tokens"], seen
    # TRL's reset_prefix_cache(): the prompt after the load reuses no KV of the old weights.
    assert seen["after"]["cached"] == 0, seen
    # ... and the new weights are checkpoint B's: a fresh LLM on B answers the same.
    fresh = run_driver(tmp_path, "--model", str(second), name="fresh")
    assert fresh["first"]["tokens"] == seen["after"]["tokens"], (fresh, seen)
