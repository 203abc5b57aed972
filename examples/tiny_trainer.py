"""The trainer side of the RL loop example: makes each step's checkpoint of a tiny Llama, with real
weights, and the greedy output those weights give for the loop's probe prompt.

Runs in a Python that has torch and transformers (an engine's virtualenv), as the trainer of an RL
framework runs apart from the inference servers. It reads one JSON request per line on stdin and
answers one JSON line on stdout:

    {"probe_ids": [...], "probe_tokens": 12}   ->  {"ready": true}
    {"step": 0}                                ->  {"step": 0, "path": ".../step-0", "probe_output": [...], "seconds": 0.4}

    python tiny_trainer.py BASE_MODEL_DIR WORK_DIR --seed 0

Step 0 draws the initial weights; each later step moves every weight matrix part of the way towards
fresh random values. That stands in for an optimizer step (this example has no reward model): what
matters to the loop is that every step's weights are new, real and tell themselves apart on the
probe, so that a server answering with another step's weights is caught. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

# A wider init than transformers' default (0.02): with near-uniform logits two steps' weights can
# agree on a short greedy probe; with this one every token depends on the weights.
INIT_STD = 0.08
# How far each step moves a weight towards fresh noise; the mix keeps the weights' scale.
STEP_SIZE = 0.35
# Draws per step until the probe tells the new weights from the last step's.
MAX_DRAWS = 8


def _load_torch():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)  # the trainer shares the machine with the servers; its model is tiny
    return torch, LlamaConfig, LlamaForCausalLM


class TinyTrainer:
    """The weights of one tiny Llama, stepped and written out as checkpoints."""

    def __init__(self, base: Path, work: Path, seed: int) -> None:
        self.torch, config_class, model_class = _load_torch()
        self.base, self.work, self.seed = base, work, seed
        self.config = config_class.from_pretrained(base)
        self.model = model_class(self.config).to(self.torch.float32).eval()
        self.probe_ids: list[int] = []
        self.probe_tokens = 0
        self.last_probe: list[int] | None = None

    def step(self, step: int) -> dict:
        """Make step *step*'s weights, write its checkpoint, and return where and its probe output."""
        started = time.monotonic()
        previous = {name: p.detach().clone() for name, p in self.model.named_parameters()} if step > 0 else None
        for draw in range(MAX_DRAWS):
            self._draw(step, draw, previous)
            output = self.greedy(self.probe_ids, self.probe_tokens)
            if output != self.last_probe:
                break
        else:
            raise RuntimeError(f"step {step}: {MAX_DRAWS} draws gave the last step's probe output")
        self.last_probe = output
        path = self._write(step)
        return {"step": step, "path": str(path), "probe_output": output, "seconds": round(time.monotonic() - started, 3)}

    def _draw(self, step: int, draw: int, previous: dict | None) -> None:
        torch = self.torch
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step * 101 + draw)
        keep = math.sqrt(1.0 - STEP_SIZE ** 2)
        with torch.no_grad():
            for name, parameter in self.model.named_parameters():
                if parameter.dim() == 1:
                    parameter.fill_(1.0)  # norms: as trained models start, and left alone
                    continue
                noise = torch.empty_like(parameter).normal_(0.0, INIT_STD, generator=generator)
                parameter.copy_(noise if previous is None else keep * previous[name] + STEP_SIZE * noise)

    def greedy(self, prompt: list[int], tokens: int) -> list[int]:
        """The model's greedy continuation of *prompt*, *tokens* long (end of sequence ignored)."""
        torch = self.torch
        output: list[int] = []
        with torch.no_grad():
            step = self.model(input_ids=torch.tensor([prompt], dtype=torch.long), use_cache=True)
            for _ in range(tokens):
                output.append(int(step.logits[0, -1].argmax()))
                step = self.model(input_ids=torch.tensor([[output[-1]]]), past_key_values=step.past_key_values, use_cache=True)
        return output

    def _write(self, step: int) -> Path:
        out = self.work / f"step-{step}"
        staging = out.with_name(out.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(self.base, staging, ignore=shutil.ignore_patterns("*.safetensors", ".tiny-model-complete"))
        self.model.save_pretrained(staging, safe_serialization=True)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)  # whole or absent: a server never reads a half-written checkpoint
        return out


def serve(trainer: TinyTrainer) -> None:
    """Answer the loop's requests, one JSON line each, until stdin closes."""
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            if "probe_ids" in request:
                trainer.probe_ids, trainer.probe_tokens = list(request["probe_ids"]), int(request["probe_tokens"])
                answer = {"ready": True}
            else:
                answer = trainer.step(int(request["step"]))
        except Exception as exc:  # the loop shows it and stops; the trainer stays up for the next
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


def main() -> None:
    """Command line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the tiny model: config.json and the tokenizer, no weights")
    parser.add_argument("work", type=Path, help="where the step checkpoints go")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    serve(TinyTrainer(args.base, args.work, args.seed))


if __name__ == "__main__":
    main()
