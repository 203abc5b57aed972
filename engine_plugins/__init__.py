"""engine-plugins: one HTTP control contract for RL rollouts on SGLang and vLLM.

What a plugin author needs is here: :data:`hookimpl` to mark hook implementations, the
:class:`Control` every hook receives, the errors a hook may raise, and the wire models of the
contract. The layers underneath (``contract``, ``core``, ``host``, ``fanout``, ``engines``) are
the implementation. Importing this package imports no engine; each engine's code is imported only
inside its adapter (:mod:`engine_plugins.engines.sglang`, :mod:`engine_plugins.engines.vllm`).
"""

from engine_plugins.contract.control import Control
from engine_plugins.contract.errors import ContractError, StartupError
from engine_plugins.contract.hookspecs import hookimpl
from engine_plugins.contract.schema import (
    AbortRequest,
    AbortResult,
    LoadsResult,
    PartialGenerateRequest,
    PartialGenerateResult,
    PauseRequest,
    PauseState,
    SamplingParams,
    UpdateWeightVersionRequest,
    UpdateWeightVersionResult,
    WeightSwap,
    WeightSwapBeginRequest,
    WeightSwapCommitRequest,
    WeightSwapResult,
    WeightVersionSpan,
)

__version__ = "0.1.0"
__all__ = [
    "AbortRequest",
    "AbortResult",
    "ContractError",
    "Control",
    "LoadsResult",
    "PartialGenerateRequest",
    "PartialGenerateResult",
    "PauseRequest",
    "PauseState",
    "SamplingParams",
    "StartupError",
    "UpdateWeightVersionRequest",
    "UpdateWeightVersionResult",
    "WeightSwap",
    "WeightSwapBeginRequest",
    "WeightSwapCommitRequest",
    "WeightSwapResult",
    "WeightVersionSpan",
    "__version__",
    "hookimpl",
]
