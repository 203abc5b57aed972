"""Writes a tiny random-weight Llama model directory for the real-engine tests.

    python scripts/make_tiny_model.py [OUTDIR] [--size small|wide]   (default: .engines/tiny-llama, small)

No model can be downloaded here, and both engines serve one with `--load-format dummy` (random
weights) from only `config.json` and tokenizer files. This script makes those: a byte-level BPE
tokenizer trained in a moment on a few sentences, and a 2-layer LlamaConfig with head_dim 64 (the
vLLM CPU attention kernels reject head_dim 16). Runs with either engine venv's python (it needs
`tokenizers` and `transformers`). Idempotent: a complete directory is left as it is; a partial
one is replaced, and the new one appears at OUTDIR only once it is whole.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import sys
import tempfile
from pathlib import Path

# Bump when the recipe changes, so old directories are rebuilt.
RECIPE_VERSION = 2
MARKER = ".tiny-model-complete"
REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
# Special tokens come first in training, so their ids match bos_token_id / eos_token_id below.
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
SENTENCES = (
    "hello world, this is a tiny model for testing inference servers.",
    "The quick brown fox jumps over the lazy dog.",
    "Reinforcement learning rollouts need abort, pause, resume and weight versions.",
    "Numbers like 0 1 2 3 4 5 6 7 8 9 and symbols like {} [] () <> = + - * / are tokens too.",
    "SGLang and vLLM generate tokens; the trainer updates weights between steps.",
)


def default_out_dir() -> Path:
    """Where the tests look for the model: `.engines/tiny-llama` in this checkout."""
    return Path(__file__).resolve().parent.parent / ".engines" / "tiny-llama"


def is_complete(out_dir: Path, size: str = "small") -> bool:
    """True if `out_dir` holds a model made by this recipe version and size (all files, marker last)."""
    marker = out_dir / MARKER
    if not marker.is_file() or marker.read_text().strip() != f"{RECIPE_VERSION}-{size}":
        return False
    return all((out_dir / name).is_file() for name in REQUIRED_FILES)


# head_dim 64 in both: vLLM's CPU attention supports it, not 16.
SIZES = {
    # SGLang's CPU path (torch_native attention) takes about 3.5 ms a decode step with this one.
    "small": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1),
    # vLLM generated 2,000 tokens of the small one in about a second, shorter than the stalls a
    # test client sees on two busy cores; this one takes about 5 ms a step there (10 s).
    "wide": dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2),
}


def build_model_dir(target: Path, size: str = "small") -> None:
    """Writes the tokenizer files and `config.json` into the existing empty directory `target`."""
    # Imported here so `--help` and the completeness check work without the engine venv.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    # Byte level: every string encodes, so no prompt a test sends can hit an unknown character.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(SENTENCES, trainer=trainer)
    ids = [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS]
    if ids != [0, 1, 2]:
        raise RuntimeError(f"special token ids are {ids}, expected [0, 1, 2]")

    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(str(target))

    config = LlamaConfig(
        vocab_size=512,  # above the tokenizer's ~300: room for the engines' padding rules
        **SIZES[size],
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
    )
    # SGLang picks the model class from this list and fails on None without it.
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(str(target))


def make_tiny_model(out_dir: Path, size: str = "small") -> Path:
    """Makes the model directory at `out_dir` unless a complete one is there; returns its path."""
    out_dir = out_dir.resolve()
    if is_complete(out_dir, size):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Two test sessions may ask at once: the second waits, then finds the model complete.
    with open(out_dir.parent / f".{out_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(out_dir, size):
            return out_dir
        # Build beside the target and rename, so a crash never leaves a half-made model at OUTDIR.
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
        staging.chmod(0o755)  # mkdtemp makes it owner-only; the model is not a secret
        try:
            build_model_dir(staging, size)
            (staging / MARKER).write_text(f"{RECIPE_VERSION}-{size}\n")
            if out_dir.exists():
                shutil.rmtree(out_dir)
            staging.rename(out_dir)
        finally:
            if staging.exists():
                shutil.rmtree(staging)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    """Command line entry: makes the model directory and prints its path and config summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=default_out_dir())
    parser.add_argument("--size", choices=sorted(SIZES), default="small", help="small (SGLang) or wide (vLLM)")
    args = parser.parse_args(argv)
    existed = is_complete(args.out_dir.resolve(), args.size)
    out_dir = make_tiny_model(args.out_dir, args.size)
    config = json.loads((out_dir / "config.json").read_text())
    state = "already complete" if existed else "written"
    print(
        f"{out_dir}: {state} ({config['architectures'][0]}, vocab {config['vocab_size']}, "
        f"{config['num_hidden_layers']} layers, hidden {config['hidden_size']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
