"""Sends a checkpoint's weights to an SGLang server as tensors, as slime's and AReaL's weight sync do.

    python tests/swap/send_tensors.py URL KEY CHECKPOINT [--weight-version V] [--no-flush] [--session [--bump V]]

Runs with the SGLang venv's python (SGLang's serializer and torch): the checkpoint's tensors,
serialized by SGLang's ``MultiprocessingSerializer`` (the tensors are shared with the server
through shared memory, so this process stays alive until the server answers), go to
``POST /update_weights_from_tensor`` with SGLang's defaults (``flush_cache`` true; false with
``--no-flush``, as slime and ROLL send it); with ``--session`` inside ``/begin_weight_update`` and
``/end_weight_update``, as miles does (``--bump``: and its ``/update_weight_version`` between the
update and the end), else without, as slime, AReaL, verl and ROLL do. Prints each answer as one
JSON line ``{"route", "status", "body"}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path



def main() -> None:
    """Command line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("key")
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--weight-version", default=None)
    parser.add_argument("--session", action="store_true")
    parser.add_argument("--no-flush", action="store_true")
    parser.add_argument("--bump", default=None)
    args = parser.parse_args()

    import torch.multiprocessing
    from safetensors.torch import load_file
    from sglang.srt.utils.common import MultiprocessingSerializer

    # Shared through named files rather than file descriptors, which a pickle sent over HTTP cannot carry.
    torch.multiprocessing.set_sharing_strategy("file_system")
    tensors = load_file(str(args.checkpoint / "model.safetensors"))
    payload = MultiprocessingSerializer.serialize(list(tensors.items()), output_str=True)
    send(args.url, args.key, payload, args.weight_version, args.session, not args.no_flush, args.bump)


def send(url: str, key: str, payload: str, weight_version: str | None = None, session: bool = False, flush: bool = True,
         bump: str | None = None) -> None:
    """The calls of one tensor update of *payload* (SGLang's serialized tensors) to *url*, each
    answer printed as one JSON line (status None when the engine did not answer)."""
    import requests

    headers = {"Authorization": f"Bearer {key}"}

    def post(route: str, body: dict) -> None:
        try:
            response = requests.post(url + route, json=body, headers=headers, timeout=300)
        except requests.RequestException as exc:  # the engine died
            print(json.dumps({"route": route, "status": None, "body": f"{type(exc).__name__}: {exc}"}), flush=True)
            return
        try:
            answer = response.json()
        except ValueError:
            answer = response.text
        print(json.dumps({"route": route, "status": response.status_code, "body": answer}), flush=True)

    body: dict = {"serialized_named_tensors": [payload]}
    if weight_version is not None:
        body["weight_version"] = weight_version
    if not flush:
        body["flush_cache"] = False
    if session:
        post("/begin_weight_update", {})
    post("/update_weights_from_tensor", body)
    if bump is not None:
        post("/update_weight_version", {"new_version": bump, "abort_all_requests": False})
    if session:
        post("/end_weight_update", {})

if __name__ == "__main__":
    main()
