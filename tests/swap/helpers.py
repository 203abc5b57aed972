"""What the weight-swap tests share: a fixed greedy probe that tells the loaded weights apart, the
engines' own weight loads, each checkpoint's reference output, and the engine-venv helper that
sends weights as tensors the way the frameworks do.

The probe's prompt is long enough (600 tokens) that both engines cache it (vLLM's CPU build
caches whole blocks only), so a probe sent after a swap would show KV reused from before it.
"""

from __future__ import annotations

import json
import random
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Awaitable, Callable

from contract.api import Api
from frameworks.native import sglang_generate
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


def engine_python(engine: str) -> Path:
    """The python of *engine*'s venv (the pinned release's)."""
    from tools.launcher.engine_server import engine_paths

    return engine_paths(engine).python


def send_tensors(target: Target, checkpoint: Path, weight_version: str | None = None, session: bool = False,
                 flush: bool = True, bump: str | None = None) -> list[dict[str, Any]]:
    """``send_tensors.py``'s answers: *checkpoint*'s weights to *target* by
    ``/update_weights_from_tensor``, sessionless unless *session* (then *bump*: a version bump
    before the session ends), with SGLang's cache flush unless not *flush*."""
    command = [str(engine_python("sglang")), str(TESTS / "swap" / "send_tensors.py"), target.url, target.api_key, str(checkpoint)]
    if weight_version is not None:
        command += ["--weight-version", weight_version]
    if session:
        command.append("--session")
    if not flush:
        command.append("--no-flush")
    if bump is not None:
        command += ["--bump", bump]
    # Files, not pipes: torch's shared-memory manager outlives the helper and would hold a pipe open.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        done = subprocess.run(command, stdout=out, stderr=err, text=True, timeout=300)
        out.seek(0)
        err.seek(0)
        assert done.returncode == 0, err.read()[-3000:]
        return [json.loads(line) for line in out.read().splitlines() if line.startswith("{")]


async def sglang_load(http, checkpoint, **body) -> dict:
    """SGLang's ``/update_weights_from_disk`` with its defaults (``flush_cache`` true), 200 or fail."""
    response = await http.post("/update_weights_from_disk", json={"model_path": str(checkpoint), **body})
    assert response.status_code == 200, f"/update_weights_from_disk -> {response.status_code} {response.text}"
    answer = response.json()
    assert answer["success"] is True, answer
    return answer


async def references(api: Api, target: Target, load: Callable[[Path], Awaitable[Any]]) -> tuple[list[int], list[int]]:
    """The probe's output with A loaded and with B loaded (each loaded by *load* while idle, where
    the engines flush or scope their caches themselves), ending with A loaded."""
    a, b = target.checkpoints
    outputs = []
    for checkpoint in (b, a):
        await load(checkpoint)
        outputs.append((await probe(api))[0])
    ref_b, ref_a = outputs
    assert ref_a != ref_b, "setup: the two checkpoints give the same greedy probe"
    return ref_a, ref_b


async def sglang_versions(api: Api, http) -> set[str]:
    """The weight version as SGLang's ``/model_info``, a new request's ``meta_info`` and the
    contract's ``/v1/loads`` report it."""
    info = (await http.get("/model_info")).json()
    meta = (await sglang_generate(http, 2))["meta_info"]
    loads = await api.loads()
    return {info["weight_version"], meta["weight_version"], loads["weight_version"]}


async def vllm_reload(api: Api, checkpoint) -> None:
    """vLLM's ``/collective_rpc`` of the workers' ``reload_weights`` from *checkpoint*."""
    response = await api.post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint)}})
    assert response.status_code == 200, f"/collective_rpc -> {response.status_code} {response.text}"


async def vllm_versions(api: Api) -> set[str]:
    """The weight version as vLLM reports it: ``GET /weight_info`` and the contract's ``/v1/loads``."""
    info = await api.ok("GET", "/weight_info")
    loads = await api.loads()
    return {info["weight_version"], loads["weight_version"]}
