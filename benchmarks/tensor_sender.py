"""Sends checkpoints' weights to an SGLang server as tensors, as slime's, miles', ROLL's, verl's and
NeMo-RL's weight syncs do: ``tests/swap/send_tensors.py``'s calls, from one long-lived process.

    <SGLang venv python> benchmarks/tensor_sender.py

Figure 9 swaps weights every step of every row; ``send_tensors.py`` imports torch and SGLang
anew for each swap (seconds each on two cores), so this process does it once and then reads one
JSON line per swap on stdin::

    {"url", "key", "checkpoint", "weight_version": null, "session": false, "flush": true, "bump": null}

and prints one JSON line ``{"route", "status", "body"}`` per call, then ``{"done": true}``. Runs
with the SGLang venv's python (SGLang's serializer and torch); each checkpoint's tensors are
loaded once and kept, so that the shared memory the server reads stays alive.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# tests/swap/send_tensors.py: the calls of one update, which this process makes once per swap.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "swap"))
from send_tensors import send  # noqa: E402


def main() -> None:
    """Serve swap requests from stdin until it closes."""
    import torch.multiprocessing
    from safetensors.torch import load_file
    from sglang.srt.utils.common import MultiprocessingSerializer

    # Shared through named files rather than file descriptors, which a pickle sent over HTTP cannot carry.
    torch.multiprocessing.set_sharing_strategy("file_system")
    loaded: dict[str, Any] = {}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        ask = json.loads(line)
        if ask["checkpoint"] not in loaded:
            loaded[ask["checkpoint"]] = list(load_file(ask["checkpoint"] + "/model.safetensors").items())
        payload = MultiprocessingSerializer.serialize(loaded[ask["checkpoint"]], output_str=True)
        send(ask["url"], ask["key"], payload, ask.get("weight_version"), bool(ask.get("session")), ask.get("flush", True), ask.get("bump"))
        print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    main()
