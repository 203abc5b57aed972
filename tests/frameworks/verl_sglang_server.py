"""SGLang held as verl holds it: its ``SGLangHttpServer`` Ray actor calls SGLang's
``Engine._launch_subprocesses`` itself (the TokenizerManager in the actor's process, the
scheduler and detokenizer in subprocesses), then serves SGLang's module-level ``app`` with
uvicorn in the actor's event loop; verl's agent loop and trainer call the actor's methods, which
call the TokenizerManager directly (no HTTP route).

    python -m frameworks.verl_sglang_server [the flags of python -m sglang.launch_server]

Source: volcengine/verl at b178a3cd56f58b2d502255daba591e92833930a7 (the newest snapshot that
could be fetched), ``verl/workers/rollout/sglang_rollout/async_sglang_server.py``:

- ``:228-367`` (``launch_server``): ``sglang.srt.entrypoints.engine._set_envs_and_config`` replaced by
  verl's (``sglang_rollout.py:47-83``: environment variables, ``mp.set_start_method("spawn")``; no
  signal handlers, which a Ray actor's thread cannot set), ``ServerArgs(**args)``,
  ``_launch_subprocesses(server_args=..., init_tokenizer_manager_func=..., run_scheduler_process_func=...,
  run_detokenizer_process_func=...)`` (SGLang >= 0.5.7), ``set_global_state(_GlobalState(...))``,
  ``app.is_single_tokenizer_mode = True``, ``app.server_args`` / ``warmup_thread_kwargs`` /
  ``warmup_thread_args``, ``run_unvicorn(app, server_args, address)`` (``verl/workers/rollout/utils.py:38-58``:
  a free port, ``uvicorn.Server(config)``, ``server.should_exit = True``, ``await server.serve()``,
  then ``asyncio.create_task(server.main_loop())``), ``tokenizer_manager.server_status = ServerStatus.Up``.
- ``:401-479`` (``generate``): ``max_new_tokens`` into the sampling params, ``GenerateReqInput(rid=request_id,
  input_ids=prompt_ids, sampling_params=..., return_logprob=...)``,
  ``await self.tokenizer_manager.generate_request(generate_request, None).__anext__()``,
  ``output["output_ids"]`` returned as the ``TokenOutput``'s token ids.

At that commit the SGLang server has no abort (``replica.py:231-241``: ``abort_all_requests`` and
``resume_all_requests`` are TODOs). verl's later ``SGLangHttpServer`` (the file as the code index
holds it, whose commit could not be named) has::

    async def abort_all_requests(self):
        if self.node_rank != 0:
            return
        await self.tokenizer_manager.pause_generation(PauseGenerationReqInput(mode="abort"))

    async def resume_generation(self):
        if self.node_rank != 0:
            return
        await self.tokenizer_manager.continue_generation(ContinueGenerationReqInput())

which this module transcribes (its fully-async trainer aborts, syncs weights, resumes, and its
client resubmits each aborted sample with the tokens it got).

Left out (GPU only): the attention backends verl sets (fa3/flashinfer: the target's CPU flags
stand), the memory saver, multi-node ranks, profiling, routed experts, LoRA, the Prometheus
middleware. The server args are the launcher's flags. This process is verl's driver
(:mod:`frameworks.ray_host`); the test reaches the actor through :mod:`frameworks.inproc_relay`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys


def _set_envs_and_config(server_args) -> None:
    """verl's replacement (``sglang_rollout.py:47-80``), less its ulimit and GPU package checks."""
    import multiprocessing as mp

    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ["NCCL_CUMEM_ENABLE"] = "0"
    os.environ["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1"
    os.environ["PYTHONFAULTHANDLER"] = "1"
    if server_args.enable_metrics:
        try:
            from sglang.srt.utils import set_prometheus_multiproc_dir
        except ImportError:
            from sglang.srt.utils.common import set_prometheus_multiproc_dir
        set_prometheus_multiproc_dir()
    mp.set_start_method("spawn", force=True)


async def run_unvicorn(app, server_args, server_address: str):
    """verl's ``run_unvicorn`` (its spelling): the app on a free port, served from this loop."""
    import uvicorn

    with socket.socket() as sock:
        sock.bind((server_address, 0))
        server_port = sock.getsockname()[1]
    app.server_args = server_args
    server = uvicorn.Server(uvicorn.Config(app, host=server_address, port=server_port, log_level="warning"))
    server.should_exit = True
    await server.serve()
    server_task = asyncio.create_task(server.main_loop())
    return server_port, server_task


class SGLangHttpServer:
    """verl's actor, its engine calls as they are."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.node_rank = 0
        self._server_address = "127.0.0.1"
        self._server_port = None

    async def launch_server(self) -> None:
        import sglang.srt.entrypoints.engine
        from sglang.srt.entrypoints.engine import Engine

        # verl imports _launch_subprocesses from sglang.srt.entrypoints.http_server, where SGLang
        # 0.5.23 has it no more: it is Engine's classmethod, returning (tokenizer manager, template
        # manager, port args, scheduler init result, ...): verl's unpacking takes the port args as
        # its scheduler_info (unused by the calls here).
        _launch_subprocesses = Engine._launch_subprocesses
        from sglang.srt.entrypoints.http_server import _GlobalState, app, set_global_state
        from sglang.srt.managers.tokenizer_manager import ServerStatus
        from sglang.srt.server_args import prepare_server_args

        sglang.srt.entrypoints.engine._set_envs_and_config = _set_envs_and_config
        os.environ["SGLANG_BLOCK_NONZERO_RANK_CHILDREN"] = "0"
        server_args = prepare_server_args(self.argv)
        self.tokenizer_manager, self.template_manager, self.scheduler_info, *_ = _launch_subprocesses(
            server_args=server_args,
            init_tokenizer_manager_func=sglang.srt.entrypoints.engine.init_tokenizer_manager,
            run_scheduler_process_func=sglang.srt.entrypoints.engine.run_scheduler_process,
            run_detokenizer_process_func=sglang.srt.entrypoints.engine.run_detokenizer_process,
        )
        set_global_state(_GlobalState(tokenizer_manager=self.tokenizer_manager, template_manager=self.template_manager,
                                      scheduler_info=self.scheduler_info))
        app.is_single_tokenizer_mode = True
        app.server_args = server_args
        app.warmup_thread_kwargs = {"server_args": server_args}
        app.warmup_thread_args = (server_args, None, None)
        self._server_port, self._server_task = await run_unvicorn(app, server_args, self._server_address)
        self.tokenizer_manager.server_status = ServerStatus.Up

    async def generate(self, prompt_ids: list[int], sampling_params: dict, request_id: str) -> dict:
        from sglang.srt.managers.io_struct import GenerateReqInput

        sampling_params = dict(sampling_params)
        sampling_params["max_new_tokens"] = sampling_params.pop("max_tokens", sampling_params.get("max_new_tokens"))
        return_logprob = sampling_params.pop("logprobs", False)
        request = {"rid": request_id, "input_ids": prompt_ids, "sampling_params": sampling_params,
                   "return_logprob": return_logprob, "image_data": None}
        generate_request = GenerateReqInput(**request)
        output = await self.tokenizer_manager.generate_request(generate_request, None).__anext__()
        # verl's TokenOutput: the token ids; the finish reason added for the test (verl's later
        # server returns it as the stop reason).
        return {"token_ids": output["output_ids"], "finish_reason": output["meta_info"]["finish_reason"]["type"]}

    async def abort_all_requests(self):
        from sglang.srt.managers.io_struct import PauseGenerationReqInput

        if self.node_rank != 0:
            return
        await self.tokenizer_manager.pause_generation(PauseGenerationReqInput(mode="abort"))

    async def resume_generation(self):
        from sglang.srt.managers.io_struct import ContinueGenerationReqInput

        if self.node_rank != 0:
            return
        await self.tokenizer_manager.continue_generation(ContinueGenerationReqInput())

    def num_unfinished(self) -> int:
        """Test-only: the requests the TokenizerManager holds (not a verl method)."""
        return len(self.tokenizer_manager.rid_to_state)


def relay_flags(argv: list[str]) -> tuple[str, int, str | None]:
    """The launcher's host, port and API key, which the relay takes (verl's app gets a free port)."""
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(argv)
    return args.host or "127.0.0.1", args.port, args.api_key


def main() -> None:
    """Start Ray, create verl's actor, launch its server, and relay the trainer's calls until stopped."""
    from frameworks.inproc_relay import ray_caller, reserve_port, serve_relay
    from frameworks.ray_host import start_ray

    host, port, api_key = relay_flags(sys.argv[1:])
    sock = reserve_port(host, port)  # before Ray takes ports of its own
    ray = start_ray()
    server = ray.remote(num_cpus=0)(SGLangHttpServer).remote(sys.argv[1:])
    ray.get(server.launch_server.remote())
    try:
        serve_relay(host, port, api_key, ray_caller(server), sock=sock)
    finally:
        ray.kill(server)
        ray.shutdown()


if __name__ == "__main__":
    main()
