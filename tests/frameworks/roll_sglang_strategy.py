"""SGLang held as ROLL holds it: an offline ``sglang.Engine`` inside the ``SgLangStrategy`` of a
ROLL Ray worker; rollouts and aborts are Python calls on its TokenizerManager (no HTTP route).

    python -m frameworks.roll_sglang_strategy [the flags of python -m sglang.launch_server]

Source: alibaba/ROLL at 8eb27cc2dc34c4d1310b169d9b86d339004d811a,
``roll/distributed/strategy/sglang_strategy.py``:

- ``:383-395`` (``SglangEngine.initialize``): ``SGLANG_BLOCK_NONZERO_RANK_CHILDREN=0``,
  ``self.engine = sglang_patch.engine.engine_module.Engine(**sglang_config)`` (ROLL's subclass of
  ``sglang.Engine`` per SGLang release: SGLang's own ``Engine`` here), then
  ``self.engine.tokenizer_manager.auto_create_handle_loop()``.
- ``:186-193`` (``abort_requests``): ``self.model.engine.tokenizer_manager.abort_request(rid)`` for
  each request id (every id the TokenizerManager holds when none are given).
- ``:195-251`` (``generate_request``): ``GenerateReqInput(input_ids=..., sampling_params=...,
  rid=payload["rid"], return_logprob=..., return_routed_experts=False, ...)``,
  ``self.model.engine.tokenizer_manager.generate_request(obj, None)``, the last chunk kept, then
  ``postprocess_generate`` (``:596-640``: ``output_token_ids`` and ``finish_reasons`` per chunk).

Left out: the worker's device set-up, weight-update groups (NCCL), offload and the HTTP-engine
variant. The engine's arguments are the launcher's flags. This process is ROLL's driver
(:mod:`frameworks.ray_host`); the test reaches the worker through :mod:`frameworks.inproc_relay`.
"""

from __future__ import annotations

import os
import sys


class SgLangStrategy:
    """ROLL's strategy and its ``SglangEngine``, their engine calls as they are."""

    def __init__(self) -> None:
        self.engine = None

    async def initialize(self, sglang_config: dict) -> None:
        import sglang

        os.environ["SGLANG_BLOCK_NONZERO_RANK_CHILDREN"] = "0"
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        self.engine = sglang.Engine(**sglang_config)
        self.engine.tokenizer_manager.auto_create_handle_loop()

    async def abort_requests(self, request_ids=None):
        if request_ids is None:
            request_ids = self.engine.tokenizer_manager.rid_to_state
        for rid in request_ids:
            self.engine.tokenizer_manager.abort_request(rid)

    async def generate_request(self, payload: dict) -> dict:
        from sglang.srt.managers.io_struct import GenerateReqInput

        obj = GenerateReqInput(input_ids=payload["input_ids"], sampling_params=payload["sampling_params"],
                               rid=payload["rid"], return_logprob=payload["return_logprob"],
                               return_routed_experts=False)
        generator = self.engine.tokenizer_manager.generate_request(obj, None)
        chunks = None
        async for chunks in generator:
            chunks = chunks
        assert chunks is not None
        chunks = chunks if isinstance(chunks, list) else [chunks]
        return postprocess_generate(chunks)

    def num_unfinished(self) -> int:
        """Test-only: the requests the TokenizerManager holds (not a ROLL method)."""
        return len(self.engine.tokenizer_manager.rid_to_state)

    def shutdown(self) -> None:
        self.engine.shutdown()


def postprocess_generate(chunks: list[dict]) -> dict:
    """ROLL's ``postprocess_generate`` (``:596-640``), its token ids and finish reasons."""
    return {"output_token_ids": [chunk.get("output_ids", []) for chunk in chunks],
            "finish_reasons": [(chunk["meta_info"].get("finish_reason") or {}).get("type") for chunk in chunks]}


def engine_config(argv: list[str]) -> tuple[dict, tuple[str, int, str | None]]:
    """``sglang.Engine`` keyword arguments from the launcher's flags, and the relay's host, port
    and API key."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    given = vars(parser.parse_args(argv))
    defaults = vars(parser.parse_args(["--model-path", given["model_path"]]))
    # The flags given (off their defaults), as ROLL's config names the engine's arguments.
    config = {k: v for k, v in given.items() if k == "model_path" or v != defaults.get(k)}
    args = argparse.Namespace(**given)
    for key in ("host", "port", "api_key"):
        config.pop(key, None)
    return config, (args.host or "127.0.0.1", args.port, args.api_key)


def main() -> None:
    """Start Ray, create ROLL's worker with its engine, and relay the scheduler's calls until stopped."""
    from frameworks.inproc_relay import ray_caller, reserve_port, serve_relay
    from frameworks.ray_host import start_ray

    config, (host, port, api_key) = engine_config(sys.argv[1:])
    sock = reserve_port(host, port)  # before Ray takes ports of its own
    ray = start_ray()
    worker = ray.remote(num_cpus=0)(SgLangStrategy).remote()
    ray.get(worker.initialize.remote(config))
    try:
        serve_relay(host, port, api_key, ray_caller(worker), sock=sock)
    finally:
        try:
            ray.get(worker.shutdown.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - the worker may be gone at this point
            pass
        ray.kill(worker)
        ray.shutdown()


if __name__ == "__main__":
    main()
