"""vLLM held as NeMo-RL holds it with ``async_engine: true``: ``vllm.v1.engine.async_llm.AsyncLLM``
inside its ``VllmAsyncGenerationWorker`` Ray actor; its generation, weight refits and cache
resets are that actor's Python calls.

    python -m frameworks.nemo_rl_vllm_worker [vLLM's serve flags]

Source: NVIDIA-NeMo/RL at 7ea279abfbeb698b092856d0dab61e7cf39bc909:

- ``nemo_rl/models/generation/vllm/vllm_worker_async.py:165-201`` (``_create_engine``):
  ``AsyncEngineArgs(**llm_kwargs)``, ``AsyncLLM.from_engine_args(self.llm_async_engine_args, stat_loggers=...)``
  (no HTTP server unless ``expose_http_server``); ``:1110-1131`` (``generate_async``, one sample):
  ``request_id = str(uuid.uuid4())``, ``self.llm.generate(prompt=..., sampling_params=..., request_id=...)``,
  the last output kept; ``:1459-1494`` (``update_weights_from_collective_async``):
  ``await self.llm.collective_rpc("update_weights_from_collective", args=tuple())``, every worker's
  result True; ``:1556-1569`` (``reset_prefix_cache_async``): ``await self.llm.reset_prefix_cache()``.
- ``nemo_rl/algorithms/async_utils/trajectory_collector.py:647-662`` (``prepare_for_refit``): with
  an async engine and ``in_flight_weight_updates`` it does not wait for the generations in flight
  ("Ongoing generations will continue with their current KV caches"), and no pause reaches vLLM;
  ``:669-690`` (``resume_after_refit``): ``invalidate_kv_cache()`` (the workers'
  ``reset_prefix_cache_async``) only when ``recompute_kv_cache_after_weight_updates``, false by
  default (``nemo_rl/algorithms/grpo.py:198``, ``examples/configs/grpo_math_1B.yaml:65``).
- ``nemo_rl/algorithms/grpo.py:2399`` (``refit_policy_generation``):
  ``policy_generation.update_weights_from_collective()`` beside the trainer's broadcast.

Replaced here (GPU only): the NCCL refit group and its packed broadcast: NeMo-RL's worker method
``update_weights_from_collective`` loads a checkpoint folder's tensors instead
(:mod:`frameworks.checkpoint_receiver`). Left out: the worker's placement, metrics logger, HTTP
server option and the sample's stop strings and batching. NeMo-RL's vLLM pin is newer than 0.32
in some releases; the test runs the pinned 0.32.

This process is NeMo-RL's driver (:mod:`frameworks.ray_host`); the test reaches the actor
through :mod:`frameworks.inproc_relay`.
"""

from __future__ import annotations

import sys

WORKER_EXTENSION = "frameworks.checkpoint_receiver.CheckpointReceiver"


class VllmAsyncGenerationWorker:
    """NeMo-RL's async worker, its engine calls as they are."""

    def __init__(self, llm_kwargs: dict) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.llm_async_engine_args = AsyncEngineArgs(**llm_kwargs)
        self.llm = AsyncLLM.from_engine_args(self.llm_async_engine_args, stat_loggers=[])

    async def generate_async(self, prompt_token_ids: list[int], max_new_tokens: int):
        """One sample, as ``process_single_sample`` sends it."""
        import uuid

        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sampling_params_for_request = SamplingParams(max_tokens=max_new_tokens, temperature=1.0, ignore_eos=True)
        request_id = str(uuid.uuid4())
        vllm_request_generator = self.llm.generate(prompt=TokensPrompt(prompt_token_ids=prompt_token_ids),
                                                   sampling_params=sampling_params_for_request, request_id=request_id)
        final_request_output = None
        async for req_output in vllm_request_generator:
            final_request_output = req_output
        if final_request_output is None:
            raise RuntimeError(f"No output received for request {request_id}")
        return final_request_output

    async def update_weights_from_collective_async(self) -> bool:
        worker_results = await self.llm.collective_rpc("update_weights_from_collective", args=tuple())
        return bool(worker_results) and all(worker_results)

    async def reset_prefix_cache_async(self):
        await self.llm.reset_prefix_cache()
        return True

    def num_unfinished(self) -> int:
        """Test-only: the requests the engine client holds (not a NeMo-RL method)."""
        return self.llm.output_processor.get_num_unfinished_requests()


def main() -> None:
    """Start Ray, create NeMo-RL's worker, and relay the driver's calls until stopped."""
    from frameworks.inproc_relay import ray_caller, reserve_port, serve_relay
    from frameworks.openrlhf_vllm_engine import engine_kwargs
    from frameworks.ray_host import start_ray

    kwargs, args = engine_kwargs(sys.argv[1:])
    kwargs.update(worker_extension_cls=WORKER_EXTENSION, enable_prefix_caching=True)
    sock = reserve_port(args.host or "127.0.0.1", args.port)  # before Ray takes ports of its own
    ray = start_ray()
    worker = ray.remote(num_cpus=0)(VllmAsyncGenerationWorker).remote(kwargs)
    ray.get(worker.num_unfinished.remote())
    try:
        serve_relay(args.host or "127.0.0.1", args.port, args.api_key[0] if isinstance(args.api_key, list) else args.api_key,
                    ray_caller(worker), sock=sock)
    finally:
        ray.kill(worker)
        ray.shutdown()


if __name__ == "__main__":
    main()
