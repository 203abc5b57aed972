"""vLLM's ``AsyncLLM`` held in-process (verl, OpenRLHF, NeMo-RL, ROLL, prime-rl's workers): with
the plugin installed and ``VLLM_PLUGINS=engine_plugins``, the engine is attached as vLLM builds it,
and the framework's unchanged calls get the contract.

The bug: after ``pause_generation(mode="keep", clear_cache=False)``, ``collective_rpc("reload_weights")``,
``update_weight_version("v2")`` and ``resume_generation()`` (NeMo-RL's in-flight update, prime-rl's),
the same 600-token prompt reused 512 of its tokens of KV computed with the old weights. With the
engine attached it reuses none, the request the pause kept finishes whole (its tokens labelled by
the version that made them), and the pause, the abort and the version went through the contract.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from targets import REPO, make_checkpoints

DRIVER = Path(__file__).with_name("inprocess_driver.py")
# Starting vLLM, two checkpoints' loads and a 400-token request, on two shared cores.
DRIVER_TIMEOUT_S = 900


def run_driver(tmp_path: Path, env: dict | None = None) -> dict:
    """The driver in the pinned vLLM's interpreter, the checkout's plugin on its path and
    ``VLLM_PLUGINS=engine_plugins`` (the environment the launcher gives a vLLM server): its result."""
    from tools.launcher.engine_server import EngineServer, ensure_engine

    paths = ensure_engine("vllm", REPO)
    first, second = make_checkpoints(paths.python, paths.model_dir)
    server = EngineServer("vllm", REPO, env=env or {}, log_path=tmp_path / "driver.log")
    log = tmp_path / "driver.log"
    with open(log, "wb") as out:
        done = subprocess.run([str(paths.python), str(DRIVER), "--model", str(first), "--reload", str(second)],
                              cwd=REPO, env=server.environment(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=DRIVER_TIMEOUT_S, preexec_fn=server.cpu_profile.place_engine)
    text = log.read_text(errors="replace")
    results = [line for line in text.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and results, text[-5000:]
    return json.loads(results[-1][len("RESULT "):])


@pytest.mark.real
def test_an_in_process_engine_reuses_no_kv_of_the_old_weights_after_a_keep_pause_update(tmp_path):
    seen = run_driver(tmp_path)
    # The cache works: the prompt sent twice before the update reuses its whole blocks (512 of 600).
    assert seen["first"]["cached"] == 0 and seen["again"]["cached"] == 512, seen
    # After the update: nothing computed with the old weights is reused.
    assert seen["after"]["cached"] == 0, seen
    # The request the pause kept finishes whole, its tokens labelled by the version that made them.
    kept = seen["kept"]
    assert kept["finish"] == "length" and kept["tokens"] == 400, kept
    assert [span[0] for span in kept["spans"]] == ["default", "v2"] and kept["spans"][-1][2] == 400, kept
    # The framework's calls went through the contract: its pause (keep), its version, its abort by id.
    assert seen["paused"] is True and seen["contract_while_paused"] == {
        "paused": True, "weight_version": "default", "in_flight": 1, "mode": "keep"}, seen
    assert seen["weight_version"] == "v2" and seen["contract_after"] == {
        "paused": False, "weight_version": "v2", "in_flight": 0, "mode": None}, seen
    assert seen["gone"]["finish"] == "abort" and 0 < seen["gone"]["tokens"] < 400, seen


@pytest.mark.real
def test_with_the_automatic_attach_off_the_engine_is_vllms_own(tmp_path):
    # ENGINE_PLUGINS_ATTACH_IN_PROCESS=0: what the same sequence does without the plugin's attach
    # (the bug, as on a checkout without it): 512 tokens of old KV reused.
    seen = run_driver(tmp_path, env={"ENGINE_PLUGINS_ATTACH_IN_PROCESS": "0"})
    assert seen["again"]["cached"] == 512 and seen["after"]["cached"] == 512, seen
    assert seen["kept"]["finish"] == "length" and seen["kept"]["tokens"] == 400, seen
