"""The plugin's :class:`~engine_plugins.sglang.engine_api.SGLangApi`, built from this fake."""

from __future__ import annotations

from types import SimpleNamespace

from engine_plugins.sglang.engine_api import SGLangApi, check_api
from . import http_server
from .io_struct import ContinueGenerationReqInput, GenerateReqInput, PauseGenerationReqInput, UpdateWeightVersionReqInput
from .tokenizer_manager import HEALTH_CHECK_RID_PREFIX, ReqState, TokenizerManager


def fake_api(serving: SimpleNamespace) -> SGLangApi:
    """The fake's names; *serving* stands for SGLang's ``get_serving()`` bag (keys, flags)."""
    api = SGLangApi(
        version="0.5.23 (engine_plugins fake)",
        http_server=http_server,
        TokenizerManager=TokenizerManager,
        ReqState=ReqState,
        GenerateReqInput=GenerateReqInput,
        UpdateWeightVersionReqInput=UpdateWeightVersionReqInput,
        PauseGenerationReqInput=PauseGenerationReqInput,
        ContinueGenerationReqInput=ContinueGenerationReqInput,
        serving=lambda: serving,
        deterministic_inference=lambda: serving.enable_deterministic_inference,
        admin_optional="admin_optional",
        health_check_prefix=HEALTH_CHECK_RID_PREFIX,
    )
    check_api(api)
    return api
