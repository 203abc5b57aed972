"""TRL's default colocate mode on a real synchronous ``vllm.LLM``, with the plugin loaded: run by
tests/frameworks/test_trl_colocate.py in the engine's interpreter (``VLLM_PLUGINS=engine_plugins``,
the checkout's plugin on ``PYTHONPATH``); it prints one line ``RESULT <json>`` with what it saw.

    python tests/frameworks/trl_colocate.py --model CHECKPOINT_A --load CHECKPOINT_B
    python tests/frameworks/trl_colocate.py --model CHECKPOINT_B            (a fresh LLM on B)

Source: huggingface/trl at 02bf6bcd3be58d928edd67b7a227235c6b599ee2,
``trl/generation/vllm_generation.py``:

- ``_init_vllm``, colocate (lines 333-337, 349-365): ``os.environ["RANK"]``, ``["LOCAL_RANK"]``,
  ``["WORLD_SIZE"]`` from the accelerator, ``ensure_master_addr_port()`` (``trl/trainer/utils.py:92``:
  ``MASTER_ADDR`` or ``localhost``, ``MASTER_PORT`` a free port), then
  ``self.llm = LLM(model=..., tensor_parallel_size=..., gpu_memory_utilization=..., max_model_len=...,
  max_num_seqs=..., enable_sleep_mode=..., model_impl=..., distributed_executor_backend="external_launcher",
  seed=accelerator.process_index // self.tensor_parallel_size, max_num_batched_tokens=4096,
  logprobs_mode="processed_logprobs", quantization=quantization)``.
- ``sync_weights``, no PEFT, no FSDP (lines 512-520, 522-526): ``for name, param in
  model.named_parameters(): ... llm_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model;
  llm_model.load_weights([(name, param.data)])``, then ``self.llm.reset_prefix_cache()``.
- ``generate``, colocate (lines 692, 695): ``vllm_prompts = [{"prompt_token_ids": ids} for ids in all_prompts]``,
  ``all_outputs = self.llm.generate(vllm_prompts, sampling_params=sampling_params, use_tqdm=False)``.

Here unchanged except the GPU-only pieces: one rank (``RANK=0``, ``WORLD_SIZE=1``, ``LOCAL_RANK=0``,
``MASTER_ADDR=127.0.0.1``, a free loopback port), ``external_launcher`` (it runs on vLLM's CPU
build), no ``gpu_memory_utilization``, sleep mode or quantization, greedy sampling. The
"trainer's parameters" are checkpoint B's tensors, one ``load_weights`` call each as TRL makes
them. On the CPU build a bare ``load_weights`` after start-up fails (the linear layers are
repacked, their original parameters left empty: ``--bare`` makes TRL's plain calls and records
``model.layers.0.mlp.down_proj.weight: AssertionError: Attempted to load weight
(torch.Size([512, 1024])) into parameter (torch.Size([0]))``), so by default the calls run
between vLLM's ``initialize_layerwise_reload`` and ``finalize_layerwise_reload`` (as
tests/frameworks/checkpoint_receiver.py does); on a GPU they are TRL's plain calls.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

PROMPT_TOKENS = 600
GREEDY_TOKENS = 16


def free_port() -> int:
    """A free loopback port (TRL's ``_find_free_port``, on 127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tensors(folder: str):
    """Checkpoint *folder*'s tensors: the trainer's ``named_parameters()``."""
    from safetensors import safe_open

    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), framework="pt", device="cpu") as checkpoint:
            for name in checkpoint.keys():
                yield name, checkpoint.get_tensor(name)


def recording_plugin_loads() -> list[str]:
    """The names of the general plugins vLLM loads in this process from now on (observed only)."""
    import vllm.plugins as plugins

    loaded: list[str] = []
    original = plugins.load_plugins_by_group

    def load(group):
        found = original(group)
        if group == plugins.DEFAULT_PLUGINS_GROUP:
            loaded.extend(found)
        return found

    plugins.load_plugins_by_group = load
    return loaded


def drive(model: str, load_from: str | None, bare: bool = False) -> dict:
    """The sequence of the module docstring; what it saw, as JSON-able values."""
    os.environ["RANK"] = "0"
    os.environ["LOCAL_RANK"] = "0"
    os.environ["WORLD_SIZE"] = "1"
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    loaded = recording_plugin_loads()

    import torch
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="float32", max_model_len=2048, max_num_seqs=16,
              distributed_executor_backend="external_launcher", seed=0, max_num_batched_tokens=4096,
              logprobs_mode="processed_logprobs")
    prompt = [10 + (i * 7) % 400 for i in range(PROMPT_TOKENS)]
    params = SamplingParams(n=1, temperature=0.0, max_tokens=GREEDY_TOKENS, ignore_eos=True)

    def generate() -> dict:
        out = llm.generate([{"prompt_token_ids": prompt}], sampling_params=params, use_tqdm=False)[0]
        return {"tokens": list(out.outputs[0].token_ids), "cached": out.num_cached_tokens or 0}

    seen: dict = {"general_plugins": sorted(loaded), "executor": type(llm.llm_engine.model_executor).__name__}
    seen["first"] = generate()
    if load_from is None:
        return seen
    seen["again"] = generate()

    # sync_weights: TRL's path to the model, one load_weights call per parameter.
    llm_model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    dtype = runner.model_config.dtype
    named = [(name, t.to(dtype)) for name, t in tensors(load_from)]
    if bare:
        try:
            for name, param in named:
                llm_model.load_weights([(name, param)])
        except Exception as exc:
            seen["bare_load"] = f"{name}: {type(exc).__name__}: {exc}"[:400]
            return seen
        seen["bare_load"] = "ok"
    else:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

        initialize_layerwise_reload(llm_model)
        for name, param in named:
            llm_model.load_weights([(name, param)])
        finalize_layerwise_reload(llm_model, runner.model_config)
    seen["loaded_tensors"] = len(named)
    llm.reset_prefix_cache()
    seen["after"] = generate()
    seen["after_again"] = generate()
    return seen


def main() -> None:
    """Parse the flags, drive, print the result line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--load", help="the checkpoint whose tensors TRL's sync_weights loads")
    parser.add_argument("--bare", action="store_true", help="TRL's plain load_weights calls, no layerwise reload")
    args = parser.parse_args()
    print("RESULT " + json.dumps(drive(args.model, args.load, args.bare)), flush=True)


if __name__ == "__main__":
    main()
