"""What the weight-swap tests share: a fixed greedy probe that tells the loaded weights apart,
and the engine-venv helpers that send weights the way the frameworks do.

The probe's prompt is long enough (600 tokens) that both engines cache it (vLLM's CPU build
caches whole blocks only), so a probe sent after a swap would show KV reused from before it.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

from contract.api import Api
from targets import TESTS, Target

PROBE_IDS = random.Random(8).choices(range(3, 300), k=600)
PROBE_TOKENS = 12


async def probe(api: Api) -> tuple[list[int], int]:
    """The probe's greedy output through the contract, and the prompt tokens served from cache."""
    answer = await api.ok("POST", "/partial_generate", {
        "input_ids": PROBE_IDS,
        "sampling_params": {"max_new_tokens": PROBE_TOKENS, "temperature": 0.0, "ignore_eos": True},
    })
    assert answer["finish_reason"] == "length", answer
    return answer["output_ids"], answer["cached_tokens"] or 0


def engine_python(target: Target, engine: str) -> Path:
    """The python of the venv *target*'s engine runs in."""
    from engine_plugins.launcher.engine_server import engine_paths

    return engine_paths(engine).python


def send_tensors(target: Target, checkpoint: Path, weight_version: str | None = None, session: bool = False) -> list[dict[str, Any]]:
    """``send_tensors.py``'s answers: *checkpoint*'s weights to *target* by
    ``/update_weights_from_tensor``, sessionless unless *session*."""
    command = [str(engine_python(target, "sglang")), str(TESTS / "swap" / "send_tensors.py"), target.url, target.api_key, str(checkpoint)]
    if weight_version is not None:
        command += ["--weight-version", weight_version]
    if session:
        command.append("--session")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
