"""vLLM held as verl holds it: its ``vLLMHttpServer`` Ray actor builds an in-process ``AsyncLLM``,
then vLLM's ``build_app`` and ``init_app_state`` and serves the app with uvicorn from the actor's
event loop; verl's agent loop, trainer and checkpoint engine call the actor's methods, which call
the engine directly (its aborts through vLLM's internals, not a route).

    python -m frameworks.verl_vllm_server [vLLM's serve flags]

Source: volcengine/verl at b178a3cd56f58b2d502255daba591e92833930a7 (the newest snapshot that
could be fetched), ``verl/workers/rollout/vllm_rollout/vllm_async_server.py``:

- ``:391-421`` (``run_server``): ``AsyncEngineArgs.from_cli_args(args)``, ``create_engine_config``,
  ``AsyncLLM.from_vllm_config(vllm_config=..., usage_context=..., enable_log_requests=..., disable_log_stats=...)``,
  ``reset_mm_cache()``, ``build_app(args)``, ``await init_app_state(engine_client, app.state, args)``,
  ``run_unvicorn(app, args, address)`` (``verl/workers/rollout/utils.py:38-58``).
- ``:183-195`` (``collective_rpc``): ``await self.engine.collective_rpc(method=..., timeout=..., args=..., kwargs=...)``,
  which verl's ``ServerAdapter`` (``vllm_rollout.py:128``) calls for the workers' weight updates.
- ``:445-547`` (``generate``): ``SamplingParams(max_tokens=..., **sampling_params)``, ``TokensPrompt``,
  ``self.engine.generate(prompt=..., sampling_params=..., request_id=request_id, ...)``, the last output
  kept; ``stop_reason`` "aborted" for vLLM's finish reason "abort", "completed" for "stop"/"length".
- ``:595-597`` (``clear_kv_cache``): ``await self.engine.reset_prefix_cache()``.
- ``:602-642`` (``abort_all_requests``) and ``:644-686`` (``abort_request``): for each request state,
  ``req_state.make_request_output([], pooling_output=None, finish_reason=FinishReason.ABORT, stop_reason=None)``
  put on its queue, ``self.engine.output_processor.abort_requests(request_ids)``,
  ``await self.engine.engine_core.abort_requests_async(request_ids)``, then ``clear_kv_cache()``.

Replaced here (GPU only): verl's weight transfer (its ``ServerAdapter`` workers receive the
tensors over CUDA IPC/NCCL): the worker method verl reaches through ``collective_rpc`` loads a
checkpoint folder instead (:mod:`frameworks.checkpoint_receiver`, ``update_weights_from_collective``).
Left out: the ``monkey_patch_model`` worker call (verl's own worker extension), multi-node and
data-parallel ranks, LoRA, profiling, multimodal inputs. verl pins vLLM 0.24, which the plugin
refuses; this runs on the pinned 0.32. This process is verl's driver (:mod:`frameworks.ray_host`);
the test reaches the actor through :mod:`frameworks.inproc_relay`.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

WORKER_EXTENSION = "frameworks.checkpoint_receiver.CheckpointReceiver"


class vLLMHttpServer:  # noqa: N801 - verl's name
    """verl's actor, its engine calls as they are."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self._server_address = "127.0.0.1"
        self.node_rank = 0

    async def launch_server(self) -> None:
        from frameworks.skyrl_vllm_server import parse

        args = parse(self.argv)
        args.worker_extension_cls = WORKER_EXTENSION
        args.enable_prefix_caching = True
        await self.run_server(args)

    async def run_server(self, args) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.openai.api_server import build_app, init_app_state
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        from frameworks.verl_sglang_server import run_unvicorn

        engine_args = AsyncEngineArgs.from_cli_args(args)
        usage_context = UsageContext.OPENAI_API_SERVER
        vllm_config = engine_args.create_engine_config(usage_context=usage_context)
        engine_client = AsyncLLM.from_vllm_config(vllm_config=vllm_config, usage_context=usage_context,
                                                  enable_log_requests=engine_args.enable_log_requests,
                                                  disable_log_stats=engine_args.disable_log_stats)
        await engine_client.reset_mm_cache()
        app = build_app(args)
        await init_app_state(engine_client, app.state, args)
        self.engine = engine_client
        self._server_port, self._server_task = await run_unvicorn(app, args, self._server_address)

    async def collective_rpc(self, method: str, timeout: Optional[float] = None, args: tuple = (),
                             kwargs: Optional[dict[str, Any]] = None):
        await self.engine.collective_rpc(method=method, timeout=timeout, args=tuple(args), kwargs=kwargs)

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> dict:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sampling_params = dict(sampling_params)
        max_tokens = sampling_params.pop("max_tokens")
        sampling_params["logprobs"] = 0 if sampling_params.pop("logprobs", False) else None
        sampling_params.setdefault("repetition_penalty", 1.0)
        sampling_params = SamplingParams(max_tokens=max_tokens, **sampling_params)
        prompt = TokensPrompt(prompt_token_ids=prompt_ids)
        generator = self.engine.generate(prompt=prompt, sampling_params=sampling_params, request_id=request_id)
        final_res = None
        async for output in generator:
            final_res = output
        assert final_res is not None
        finish_reason = final_res.outputs[0].finish_reason
        if finish_reason == "abort":
            stop_reason = "aborted"
        elif finish_reason in ("stop", "length"):
            stop_reason = "completed"
        else:
            stop_reason = finish_reason
        # verl's TokenOutput (token ids, stop reason); the cached-token count added for the test.
        return {"token_ids": list(final_res.outputs[0].token_ids), "stop_reason": stop_reason,
                "num_cached_tokens": final_res.num_cached_tokens}

    async def clear_kv_cache(self):
        if self.node_rank == 0:
            await self.engine.reset_prefix_cache()

    async def abort_all_requests(self, reset_prefix_cache: bool = True) -> dict[str, Any]:
        try:
            request_states_snapshot = list(self.engine.output_processor.request_states.items())
            request_ids = [req_id for req_id, _ in request_states_snapshot]
            if not request_ids:
                return {"aborted_count": 0, "request_ids": []}
            from vllm.v1.engine import FinishReason

            for _, req_state in request_states_snapshot:
                request_output = req_state.make_request_output([], pooling_output=None, finish_reason=FinishReason.ABORT,
                                                               stop_reason=None)
                req_state.queue.put(request_output)
            self.engine.output_processor.abort_requests(request_ids)
            await self.engine.engine_core.abort_requests_async(request_ids)
            if reset_prefix_cache:
                await self.clear_kv_cache()
            return {"aborted_count": len(request_ids), "request_ids": request_ids}
        except Exception as e:  # noqa: BLE001 - verl's
            return {"aborted_count": 0, "request_ids": [], "error": str(e)}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict[str, Any]:
        try:
            req_state = self.engine.output_processor.request_states.get(request_id)
            if req_state is None:
                return {"aborted": False, "error": f"Request {request_id} not found"}
            from vllm.v1.engine import FinishReason

            request_output = req_state.make_request_output([], pooling_output=None, finish_reason=FinishReason.ABORT,
                                                           stop_reason=None)
            req_state.queue.put(request_output)
            self.engine.output_processor.abort_requests([request_id])
            await self.engine.engine_core.abort_requests_async([request_id])
            if reset_prefix_cache:
                await self.clear_kv_cache()
            return {"aborted": True, "request_id": request_id}
        except Exception as e:  # noqa: BLE001 - verl's
            return {"aborted": False, "request_id": request_id, "error": str(e)}

    def num_unfinished(self) -> int:
        """Test-only: the requests the engine client holds (not a verl method)."""
        return self.engine.output_processor.get_num_unfinished_requests()


def main() -> None:
    """Start Ray, create verl's actor, launch its server, and relay the trainer's calls until stopped."""
    from frameworks.inproc_relay import ray_caller, reserve_port, serve_relay
    from frameworks.ray_host import start_ray
    from frameworks.skyrl_vllm_server import parse

    args = parse(sys.argv[1:])
    sock = reserve_port(args.host or "127.0.0.1", args.port)  # before Ray takes ports of its own
    ray = start_ray()
    server = ray.remote(num_cpus=0)(vLLMHttpServer).remote(sys.argv[1:])
    ray.get(server.launch_server.remote())
    api_key = args.api_key[0] if isinstance(args.api_key, list) else args.api_key
    try:
        serve_relay(args.host or "127.0.0.1", args.port, api_key, ray_caller(server), sock=sock)
    finally:
        ray.kill(server)
        ray.shutdown()


if __name__ == "__main__":
    main()
