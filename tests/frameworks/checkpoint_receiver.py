"""TEST-ONLY vLLM worker methods under the RL frameworks' own names, for their weight
"broadcasts": the tensors come from a checkpoint folder on this machine instead of over NCCL
(which vLLM's CPU build has not), and go into the model through its own ``load_weights``, as the
frameworks' worker extensions put the tensors they receive.

- ``update_weight(name, dtype, shape, empty_cache)``: OpenRLHF's ``WorkerWrap.update_weight``
  (OpenRLHF/OpenRLHF at 3c3be6234e0cb353e76bb8019947db9dfe99fca7,
  ``openrlhf/trainer/ray/vllm_worker_wrap.py:32-50``): checks the dtype, receives one tensor of
  *shape* by ``broadcast(weight, src=0)``, ``self.model_runner.model.load_weights(weights=[(name, weight)])``.
  Here the tensor is the folder's tensor *name*.
- ``update_weights_from_collective()``: NeMo-RL's ``VllmInternalWorkerExtension``
  (NVIDIA-NeMo/RL at 7ea279abfbeb698b092856d0dab61e7cf39bc909,
  ``nemo_rl/models/generation/vllm/vllm_backend.py:751-779``): every tensor of the prepared
  state-dict info from a packed broadcast, each through ``_load_weights``; True on success.
  Here every tensor of the folder.

The folder is ``FRAMEWORK_WEIGHTS_DIR`` in the worker's environment (the driver's, inherited
through Ray and vLLM's engine-core process). Named with ``worker_extension_cls``
(``frameworks.checkpoint_receiver.CheckpointReceiver``), with ``tests/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import torch


def _folder() -> Path:
    return Path(os.environ["FRAMEWORK_WEIGHTS_DIR"])


def _tensors() -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    for file in sorted(_folder().glob("*.safetensors")):
        with safe_open(str(file), framework="pt", device="cpu") as checkpoint:
            for name in checkpoint.keys():
                yield name, checkpoint.get_tensor(name)


class CheckpointReceiver:
    """Mixed into vLLM's worker by ``worker_extension_cls``: ``self.model_runner`` is the worker's.

    On the CPU build the model's linear layers are repacked after loading (their original
    parameters left empty), so a bare ``load_weights`` after start-up fails; the tensors go in as
    vLLM's own in-place reload puts them (``initialize_layerwise_reload`` before the first,
    ``finalize_layerwise_reload`` after the last), which on a GPU is a plain ``load_weights``."""

    _reloading = False

    def _begin(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        if not self._reloading:
            initialize_layerwise_reload(self.model_runner.model)
            self._reloading = True

    def _end(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model_runner.model, self.model_runner.model_config)
        self._reloading = False

    def update_weight(self, name, dtype, shape, empty_cache=False):
        weight = next(t for n, t in _tensors() if n == name).to(self.model_runner.model_config.dtype)
        assert tuple(weight.shape) == tuple(shape), f"{name}: {tuple(weight.shape)} != {tuple(shape)}"
        self._begin()
        self.model_runner.model.load_weights(weights=[(name, weight)])
        del weight
        if empty_cache:  # OpenRLHF sets it on the last parameter of a broadcast
            self._end()

    def update_weights_from_collective(self) -> bool:
        dtype = self.model_runner.model_config.dtype
        self._begin()
        self.model_runner.model.load_weights(weights=((n, t.to(dtype)) for n, t in _tensors()))
        self._end()
        return True


def parameters(folder: str) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """The trainer's side: ``(name, dtype, shape)`` of each tensor of *folder*, the model's
    ``named_parameters()`` as OpenRLHF's ``broadcast_to_vllm`` walks them."""
    from safetensors import safe_open

    out = []
    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), framework="pt", device="cpu") as checkpoint:
            for name in checkpoint.keys():
                out.append((name, tuple(checkpoint.get_slice(name).get_shape())))
    return [(name, torch.float32, shape) for name, shape in out]
