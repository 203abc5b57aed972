"""vLLM held as OpenRLHF holds it: ``vllm.AsyncLLMEngine`` inside its ``RolloutRayActor``, no HTTP
server; the trainer reaches it only through the actor's methods.

    python -m frameworks.openrlhf_vllm_engine [vLLM's serve flags]

Source: OpenRLHF/OpenRLHF at 3c3be6234e0cb353e76bb8019947db9dfe99fca7:

- ``openrlhf/trainer/ray/vllm_engine.py:34-184`` (``RolloutRayActor``): ``async __init__`` builds
  ``vllm.AsyncEngineArgs(*args, **kwargs)`` and ``vllm.AsyncLLMEngine.from_engine_args(engine_args)``,
  then ``await self.llm.is_sleeping()``; ``update_weight`` is ``await self.llm.collective_rpc("update_weight",
  args=(name, dtype, shape, empty_cache))``; ``reset_prefix_cache``, ``pause_generation``
  (``await self.llm.pause_generation(mode="keep")``), ``resume_generation``, and ``generate``
  (``TokensPrompt``, ``self.llm.generate(prompt, deepcopy(sampling_params), request_id=random_uuid())``,
  the last output returned); ``get_num_unfinished_requests`` reads
  ``self.llm.output_processor.get_num_unfinished_requests()``.
- ``:211-313`` (``create_vllm_engines``): ``worker_extension_cls`` OpenRLHF's ``WorkerWrap``,
  ``distributed_executor_backend="uni"`` for one GPU, ``enable_prefix_caching`` from its config,
  the actor created with ``RolloutRayActor.options(num_cpus=..., num_gpus=..., scheduling_strategy=...)``.
- ``openrlhf/trainer/ppo_trainer_async.py:255-265`` (``broadcast_to_vllm`` with partial rollout):
  ``pause_generation`` on every engine, the broadcast, then ``resume_generation``;
  ``openrlhf/trainer/ray/ppo_actor.py:408-489`` (the broadcast): ``reset_prefix_cache.remote()`` on
  every engine first when prefix caching is on (awaited only at the end), then for each parameter
  ``update_weight.remote(name, dtype=param.dtype, shape=..., empty_cache=count == num_params)`` and
  the NCCL broadcast of its data, each awaited.

Replaced here (GPU only): the NCCL group and broadcast (``init_process_group``, the tensor sent by
the trainer): OpenRLHF's ``update_weight`` worker method reads the tensor of that name from a
checkpoint folder instead (:mod:`frameworks.checkpoint_receiver`, named as the worker extension),
and the trainer's parameters are that folder's tensors. Left out: the agent executor and the
multimodal pad handling of ``generate`` (unused for token prompts), the device environment
(``CUDA_VISIBLE_DEVICES``, bundle indices) and the placement group; the actor takes no CPU of
Ray's (vLLM's engine-core process uses the cores). OpenRLHF requires vLLM > 0.8.5 and runs here on
the pinned 0.32.

This process is OpenRLHF's driver (:mod:`frameworks.ray_host`) and its trainer's side of the
broadcast; the test reaches the actor through :mod:`frameworks.inproc_relay`.
"""

from __future__ import annotations

import asyncio
import os
import sys
from copy import deepcopy

WORKER_EXTENSION = "frameworks.checkpoint_receiver.CheckpointReceiver"


class RolloutRayActor:
    """OpenRLHF's actor, its engine calls as they are."""

    async def __init__(self, *args, **kwargs):
        import vllm

        kwargs.pop("num_gpus", None)
        kwargs.pop("full_determinism", None)
        # OpenRLHF's _configure_vllm_env: serialization for collective_rpc, the V1 engine.
        os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
        os.environ["VLLM_USE_V1"] = "1"
        self.kwargs = kwargs
        engine_args = vllm.AsyncEngineArgs(*args, **self.kwargs)
        self.llm = vllm.AsyncLLMEngine.from_engine_args(engine_args)
        await self.llm.is_sleeping()

    async def update_weight(self, name, dtype, shape, empty_cache=False):
        return await self.llm.collective_rpc("update_weight", args=(name, dtype, shape, empty_cache))

    async def reset_prefix_cache(self):
        await self.llm.reset_prefix_cache()

    async def pause_generation(self):
        await self.llm.pause_generation(mode="keep")

    async def resume_generation(self):
        await self.llm.resume_generation()

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        from vllm.inputs import TokensPrompt
        from vllm.utils import random_uuid

        prompt = TokensPrompt(prompt_token_ids=prompt_token_ids)
        generator = self.llm.generate(prompt, deepcopy(sampling_params), request_id=random_uuid())
        final_output = None
        async for request_output in generator:
            final_output = request_output
        return final_output

    def get_num_unfinished_requests(self) -> int:
        return self.llm.output_processor.get_num_unfinished_requests()


async def broadcast_to_vllm(engines, weights_dir: str, partial_rollout: bool = True, use_prefix_cache: bool = True) -> int:
    """The trainer's weight broadcast as OpenRLHF's async trainer runs it; returns the number of
    parameters sent."""
    from frameworks.checkpoint_receiver import parameters

    if partial_rollout:
        await asyncio.gather(*[engine.pause_generation.remote() for engine in engines])
    try:
        cache_reset_refs = [engine.reset_prefix_cache.remote() for engine in engines] if use_prefix_cache else []
        params = parameters(weights_dir)
        for count, (name, dtype, shape) in enumerate(params, start=1):
            await asyncio.gather(*[engine.update_weight.remote(name, dtype=dtype, shape=shape, empty_cache=count == len(params))
                                   for engine in engines])
        if cache_reset_refs:
            await asyncio.gather(*cache_reset_refs)
    finally:
        if partial_rollout:
            await asyncio.gather(*[engine.resume_generation.remote() for engine in engines])
    return len(params)


def sampling(max_tokens: int, **extra):
    """OpenRLHF's ``SamplingParams`` for a rollout (``ignore_eos`` so that a request's length is known)."""
    from vllm import SamplingParams

    return SamplingParams(max_tokens=max_tokens, temperature=1.0, ignore_eos=True, **extra)


def engine_kwargs(argv: list[str]) -> tuple[dict, object]:
    """``AsyncEngineArgs`` keyword arguments from vLLM's serve flags, and the parsed flags."""
    import dataclasses

    from vllm.engine.arg_utils import AsyncEngineArgs

    from frameworks.skyrl_vllm_server import parse

    args = parse(argv)
    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    return {k: v for k, v in vars(args).items() if k in fields}, args


def main() -> None:
    """Start Ray, create OpenRLHF's actor, and relay the trainer's calls until stopped."""
    from frameworks.inproc_relay import reserve_port, serve_relay
    from frameworks.ray_host import start_ray

    kwargs, args = engine_kwargs(sys.argv[1:])
    kwargs.update(worker_extension_cls=WORKER_EXTENSION, enable_prefix_caching=True, distributed_executor_backend="uni",
                  num_gpus=0, full_determinism=False)
    sock = reserve_port(args.host or "127.0.0.1", args.port)  # before Ray takes ports of its own
    ray = start_ray()
    engine = ray.remote(num_cpus=0)(RolloutRayActor).remote(**kwargs)
    ray.get(engine.get_num_unfinished_requests.remote())  # __init__ has run
    engines = [engine]

    async def call(method: str, call_args: list, call_kwargs: dict):
        if method == "broadcast_to_vllm":
            return await broadcast_to_vllm(engines, os.environ["FRAMEWORK_WEIGHTS_DIR"], *call_args, **call_kwargs)
        if method == "generate":  # the rollout executor's call: token ids and OpenRLHF's sampling params
            prompt_ids, max_tokens = call_args
            return await engine.generate.remote(prompt_ids, sampling(max_tokens))
        return await getattr(engine, method).remote(*call_args, **call_kwargs)

    try:
        serve_relay(args.host or "127.0.0.1", args.port, (args.api_key or [None])[0] if isinstance(args.api_key, list) else args.api_key, call, sock=sock)
    finally:
        ray.kill(engine)
        ray.shutdown()


if __name__ == "__main__":
    main()
