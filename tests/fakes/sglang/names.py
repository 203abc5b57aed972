"""The plugin's :class:`~engine_plugins.engines.sglang.facade.SGLangNames`, built from this fake."""

from __future__ import annotations

from types import SimpleNamespace

from engine_plugins.engines.probe import ProbeReport
from engine_plugins.engines.sglang.facade import SGLangNames, check_names
from engine_plugins.engines.sglang.manifest import (
    ABORT_ON_CLOSE,
    CONFIG_VALUES,
    DISPATCH_MARK,
    ENGINE_WEIGHT_VERSION,
    LOAD_SNAPSHOTS,
    LOGICAL_STATES,
    MANIFEST,
    MARKED_ABORTS,
    STREAMING_FLAG,
    WEIGHT_UPDATE_SESSION,
)

from . import http_server
from .hook_registry import HookRegistry, HookType
from .io_struct import (BeginWeightUpdateReqInput, ContinueGenerationReqInput, EndWeightUpdateReqInput, GenerateReqInput,
                        PauseGenerationReqInput, UpdateWeightVersionReqInput)
from . import tokenizer_manager as tm_module
from .tokenizer_manager import (HEALTH_CHECK_RID_PREFIX, LoadSnapshot, ReqState, ReqState0517, TokenizerManager,
                                TokenizerManager0512, TokenizerManager0515, TokenizerManager0516, TokenizerManager0517,
                                TokenizerManager0518, TokenizerManager0519)

# The TokenizerManager of each release the fake follows (the newest for any other).
TOKENIZER_MANAGERS = {"0.5.12": TokenizerManager0512, "0.5.15": TokenizerManager0515, "0.5.16": TokenizerManager0516,
                      "0.5.17": TokenizerManager0517, "0.5.18": TokenizerManager0518, "0.5.19": TokenizerManager0519}


def fake_names(serving: SimpleNamespace, release: str = "0.5.23") -> SGLangNames:
    """The fake's names; *serving* stands for SGLang's ``get_serving()`` bag (keys, flags).
    *release*: the SGLang release the fake follows (0.5.23, 0.5.19, 0.5.18, 0.5.17, 0.5.16, 0.5.15 or 0.5.12), whose features the
    manifest lists. Checked as SGLang's are, against the plugin's manifest."""
    features = MANIFEST.releases[release]
    names = SGLangNames(
        version=f"{release} (engine_plugins fake)",
        http_server=http_server,
        TokenizerManager=TOKENIZER_MANAGERS.get(release, TokenizerManager),
        ReqState=ReqState0517 if features[MARKED_ABORTS] else ReqState,
        LoadSnapshot=LoadSnapshot if features[LOAD_SNAPSHOTS] else None,
        GenerateReqInput=GenerateReqInput,
        UpdateWeightVersionReqInput=UpdateWeightVersionReqInput,
        PauseGenerationReqInput=PauseGenerationReqInput,
        ContinueGenerationReqInput=ContinueGenerationReqInput,
        HookRegistry=HookRegistry,
        HookType=HookType,
        serving=lambda: serving,
        deterministic_inference=lambda: serving.enable_deterministic_inference,
        admin_optional="admin_optional",
        health_check_prefix=HEALTH_CHECK_RID_PREFIX,
        BeginWeightUpdateReqInput=BeginWeightUpdateReqInput if features[WEIGHT_UPDATE_SESSION] else None,
        EndWeightUpdateReqInput=EndWeightUpdateReqInput if features[WEIGHT_UPDATE_SESSION] else None,
        parallel=lambda: SimpleNamespace(dp_size=getattr(serving, "dp_size", 1)),
        notes=MANIFEST.shims(ProbeReport(features=dict(features))),
        dispatch_mark=features[DISPATCH_MARK],
        aborts_on_close=features[ABORT_ON_CLOSE],
        engine_weight_version=features[ENGINE_WEIGHT_VERSION],
        config_values=features[CONFIG_VALUES],
        streaming_flag=features[STREAMING_FLAG],
        RequestAbortedError=tm_module.RequestAbortedError if features[MARKED_ABORTS] else None,
        logical_states=features[LOGICAL_STATES],
        load_snapshots=features[LOAD_SNAPSHOTS],
        internal_modules=(tm_module.__name__,),
    )
    check_names(names)
    return names
