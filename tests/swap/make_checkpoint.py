"""Writes a checkpoint of the tiny model with real weights, for the weight-swap tests.

    python tests/swap/make_checkpoint.py BASE_DIR OUT_DIR --seed N

Runs with an engine venv's python (it needs torch and transformers). BASE_DIR is the tiny model
(``config.json`` and the tokenizer, no weights); OUT_DIR gets the same files and a
``model.safetensors`` of weights drawn with *seed*. Two seeds give two checkpoints of one shape
whose greedy outputs differ (the init is wider than transformers' default, so that they do).
Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

# transformers' default init (std 0.02) gives near-uniform logits, under which two seeds can agree
# on a short greedy probe; a wider one makes every token depend on the weights.
INIT_STD = 0.08


def make_checkpoint(base: Path, out: Path, seed: int) -> Path:
    """Write the checkpoint of *seed* at *out* (replaced if there), from the tiny model at *base*."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    # A staging folder of this process's own: two test runs may make the same checkpoint at once.
    staging = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(base, staging, ignore=shutil.ignore_patterns("*.safetensors", ".tiny-model-complete"))
    config = LlamaConfig.from_pretrained(base)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.fill_(1.0)  # norms: as trained models start
            else:
                parameter.normal_(0.0, INIT_STD, generator=generator)
    model.save_pretrained(staging, safe_serialization=True)
    if (out / "model.safetensors").exists():  # another run made it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
        return out
    shutil.rmtree(out, ignore_errors=True)
    try:
        staging.rename(out)
    except OSError:  # another run put the same checkpoint there first
        shutil.rmtree(staging, ignore_errors=True)
    return out


def main() -> None:
    """Command line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    print(make_checkpoint(args.base, args.out, args.seed))


if __name__ == "__main__":
    main()
