"""Ray actors holding an engine in-process, as the frameworks' rollout actors do, each made a
contract server by one base class (:class:`ContractActor`, the engine in ``self.engine``): put
their handles in a ``Fleet`` (``make demo DEPLOY=ray``, tests/ray_fleet/).

Each has ``start`` (the engine made on the actor's event loop, where its requests will run),
``reload_weights`` (the engine's own in-place load from a folder, inside a weight swap) and
``shutdown``. Ray's workers import this module by name: examples/ is on their path.

:func:`start_ray` starts a Ray cluster of the driver's own on this machine.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Optional

from engine_plugins.inprocess import ContractActor


# Ray's object store at its smallest: the tokens never travel through it.
OBJECT_STORE_BYTES = 80 * 1024 * 1024


def start_ray() -> Any:
    """A new local Ray cluster for this driver (``address="local"``: never another one on the
    machine), its cores, no dashboard; Ray's workers inherit this environment (PYTHONPATH)."""
    import ray

    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, object_store_memory=OBJECT_STORE_BYTES,
             _temp_dir=tempfile.mkdtemp(prefix="ray-"), configure_logging=False)
    return ray


class StubActor(ContractActor):
    """The stub engine in an actor: no weights, so a swap is version-only."""

    def __init__(self, step_s: float = 0.005) -> None:
        self.step_s = step_s
        self.engine = None

    async def start(self) -> int:
        """Make the engine; the actor's pid."""
        from engine_plugins.engines.stub.engine import StubEngine

        self.engine = StubEngine(step_s=self.step_s)
        return os.getpid()

    async def reload_weights(self, path: Optional[str] = None) -> str:
        """The stub has no weights: nothing to load."""
        return "version-only (the stub has no weights)"

    async def shutdown(self) -> None:
        """Nothing to stop."""


class VLLMActor(ContractActor):
    """vLLM's AsyncLLM in an actor (as verl's, OpenRLHF's and SkyRL's rollout workers hold it),
    on the CPU with the tests' tiny model."""

    def __init__(self, model: str, load_format: str = "dummy") -> None:
        self.model, self.load_format = model, load_format
        self.engine = None

    async def start(self) -> int:
        """Make the AsyncLLM (its engine core is a process of its own); the actor's pid."""
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(model=self.model, load_format=self.load_format, dtype="float32", max_model_len=2048,
                               max_num_seqs=64)
        self.engine = AsyncLLM.from_engine_args(args)
        return os.getpid()

    async def reload_weights(self, path: str) -> str:
        """vLLM's own in-place reload of the workers' weights from *path* (what its
        ``/collective_rpc`` ``reload_weights`` does)."""
        await self.engine.collective_rpc("reload_weights", kwargs={"weights_path": path})
        return f"vLLM's reload_weights from {os.path.basename(path)}"

    async def shutdown(self) -> None:
        """Stop the engine core."""
        if self.engine is not None:
            self.engine.shutdown()


class SGLangActor(ContractActor):
    """SGLang's Engine in an actor (as slime's and ROLL's can hold it), on the CPU with the tests'
    tiny model; made on the actor's event loop, which its TokenizerManager then runs on."""

    def __init__(self, model: str, load_format: str = "dummy") -> None:
        self.model, self.load_format = model, load_format
        self.engine = None

    async def start(self) -> int:
        """Make the Engine (its scheduler is a process of its own); the actor's pid."""
        import sglang

        self.engine = sglang.Engine(
            model_path=self.model, load_format=self.load_format, device="cpu", attention_backend="torch_native",
            disable_cuda_graph=True, max_total_tokens=131072, sleep_on_idle=True, log_level="warning",
        )
        return os.getpid()

    async def reload_weights(self, path: str) -> str:
        """SGLang's own in-place load from *path* (``update_weights_from_disk``), awaited on the
        actor's loop (the Engine's blocking form would run a loop inside this one)."""
        from sglang.srt.managers.io_struct import UpdateWeightFromDiskReqInput

        result = await self.engine.tokenizer_manager.update_weights_from_disk(UpdateWeightFromDiskReqInput(model_path=path), None)
        ok = result[0] if isinstance(result, tuple) else getattr(result, "success", True)
        if not ok:
            raise RuntimeError(f"SGLang's update_weights_from_disk failed: {result}")
        return f"SGLang's update_weights_from_disk from {os.path.basename(path)}"

    async def shutdown(self) -> None:
        """Stop the scheduler."""
        if self.engine is not None:
            self.engine.shutdown()


ACTORS = {"stub": StubActor, "vllm": VLLMActor, "sglang": SGLangActor}
