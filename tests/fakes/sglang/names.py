"""The plugin's :class:`~engine_plugins.engines.sglang.facade.SGLangNames`, built from this fake."""

from __future__ import annotations

from types import SimpleNamespace

from engine_plugins.engines.sglang.facade import SGLangNames, check_names

from . import http_server
from .hook_registry import HookRegistry, HookType
from .io_struct import (BeginWeightUpdateReqInput, ContinueGenerationReqInput, EndWeightUpdateReqInput, GenerateReqInput,
                        PauseGenerationReqInput, UpdateWeightVersionReqInput)
from .tokenizer_manager import HEALTH_CHECK_RID_PREFIX, LoadSnapshot, ReqState, TokenizerManager


def fake_names(serving: SimpleNamespace) -> SGLangNames:
    """The fake's names; *serving* stands for SGLang's ``get_serving()`` bag (keys, flags).
    Checked as SGLang's are, against the plugin's manifest."""
    names = SGLangNames(
        version="0.5.23 (engine_plugins fake)",
        http_server=http_server,
        TokenizerManager=TokenizerManager,
        ReqState=ReqState,
        LoadSnapshot=LoadSnapshot,
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
        BeginWeightUpdateReqInput=BeginWeightUpdateReqInput,
        EndWeightUpdateReqInput=EndWeightUpdateReqInput,
        parallel=lambda: SimpleNamespace(dp_size=getattr(serving, "dp_size", 1)),
    )
    check_names(names)
    return names
