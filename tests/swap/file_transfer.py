"""A TEST-ONLY weight-transfer backend for vLLM, ``file``: its ``update_info`` names a checkpoint
folder (safetensors) on the server's machine, whose tensors it loads into the model.

vLLM's weight-transfer routes (``/init_weight_transfer_engine``, ``/start_weight_update``,
``/update_weights``, ``/finish_weight_update``) reach each worker's weight-transfer engine, and
vLLM's own backends move the tensors over NCCL or CUDA IPC, neither of which the CPU build has.
This one reads them from disk instead, so that the RL frameworks' sequences through those routes
run on a real vLLM (CPU) with real weights. Only the transport is the tests': the weights are
loaded as vLLM's checkpoint-format engines load them (its IPC engine, its in-place
``reload_weights``): ``start_weight_update`` begins a layerwise reload, ``update_weights`` hands
the tensors to the model's own ``load_weights``, ``finish_weight_update`` finalizes the reload.

Nothing here is for production: any caller with the server's key could load any file the server
can read.

How the server gets it: ``--worker-extension-cls swap.file_transfer.FileTransferWorkerExtension``
(with ``tests/`` on ``PYTHONPATH``) makes vLLM import this module in every worker process before
the worker loads its model and creates its weight-transfer engine; the import registers the
backend, which ``--weight-transfer-config '{"backend": "file"}'`` then selects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

BACKEND = "file"


@dataclass
class FileTransferInitInfo(WeightTransferInitInfo):
    """Nothing to agree on: the trainer and the server share a file system."""


@dataclass
class FileTransferUpdateInfo(WeightTransferUpdateInfo):
    """One update: the checkpoint folder whose ``*.safetensors`` files are loaded."""

    path: str


class FileWeightTransferEngine(WeightTransferEngine[FileTransferInitInfo, FileTransferUpdateInfo]):
    """Loads a checkpoint folder's tensors into the model, as a checkpoint-format engine."""

    init_info_cls = FileTransferInitInfo
    update_info_cls = FileTransferUpdateInfo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initialized = False

    def init_transfer_engine(self, init_info: FileTransferInitInfo) -> None:
        """Record the handshake (a real transport opens its channel here); idempotent."""
        self.initialized = True

    def start_weight_update(self) -> None:
        """Begin a layerwise reload, as vLLM's checkpoint-format engines do."""
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        """Load one update. The base class then calls ``torch.accelerator.synchronize()``, which
        raises on a CPU-only torch ("no accelerator"); loading from disk is synchronous anyway."""
        self.receive_weights(self.parse_update_info(update_info))
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()

    def receive_weights(self, update_info: FileTransferUpdateInfo) -> None:
        """Hand every tensor of the checkpoint at ``update_info.path`` to the model's ``load_weights``."""
        if not self.initialized:
            raise RuntimeError("init_weight_transfer_engine must be called before update_weights")
        files = sorted(Path(update_info.path).glob("*.safetensors"))
        if not files:
            raise ValueError(f"no *.safetensors files in {update_info.path!r}")
        from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check

        with disable_mtp_completeness_check():
            self.model.load_weights(_tensors(files))

    def finish_weight_update(self) -> None:
        """Finalize the layerwise reload: every layer now holds the new weights."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def shutdown(self) -> None:
        """Forget the handshake (there is no channel to close)."""
        self.initialized = False


def _tensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for every tensor of *files*, one file open at a time."""
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as checkpoint:
            for name in checkpoint.keys():
                yield name, checkpoint.get_tensor(name)


class FileTransferWorkerExtension:
    """Named by ``--worker-extension-cls`` only for the import: vLLM imports it in each worker
    before the model is loaded, which registers the backend. It adds no worker methods."""


WeightTransferEngineFactory.register_engine(BACKEND, FileWeightTransferEngine)
