"""The one seam between the plugin and SGLang: every SGLang name the plugin uses, in one place.

:func:`load_sglang_api` imports them from the installed SGLang and :func:`check_api` verifies, at
startup, that each one is there, so a different SGLang version fails with a message naming the
version and what is missing instead of breaking at the first request. Tests build an
:class:`SGLangApi` from fakes (``engine_plugins.testing.sglang_fake``) without SGLang installed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Optional

from ..errors import StartupError

SUPPORTED_VERSION = "0.5.23"

# What the plugin calls or patches on SGLang's TokenizerManager (tokenizer_manager.py and
# tokenizer_control_mixin.py in 0.5.23; line numbers in engine-internals.md).
TOKENIZER_MANAGER_METHODS = (
    "generate_request",  # 895: every route's request entry; wrapped by tracking.py
    "_mark_state_dispatched",  # 1802: a request reached the scheduler; wrapped by tracking.py
    "abort_request",  # 2241: fire-and-forget AbortReq, prefix-matched by the scheduler
    "pause_generation",  # 2267
    "continue_generation",  # 2282
    "update_weight_version",  # control mixin 1065
    "get_loads",  # control mixin 1001
    "config_value",  # 2333: the weight version in force
)
REQ_STATE_FIELDS = ("dispatched", "abort_sent", "obj", "output_ids")  # tokenizer_manager.py:267-330
HTTP_SERVER_NAMES = ("app", "get_global_state", "launch_server")


@dataclass
class SGLangApi:
    """The SGLang names the plugin uses; built from the real SGLang or from test fakes."""

    version: str
    http_server: ModuleType
    """``sglang.srt.entrypoints.http_server``: ``app``, ``get_global_state``, ``launch_server``."""
    TokenizerManager: type
    ReqState: type
    GenerateReqInput: type
    UpdateWeightVersionReqInput: type
    PauseGenerationReqInput: type
    ContinueGenerationReqInput: type
    serving: Callable[[], Any]
    """SGLang's ``get_serving()`` config bag: ``api_key``, ``admin_api_key``, ``tokenizer_worker_num``."""
    deterministic_inference: Callable[[], bool]
    """Whether the server runs with ``--enable-deterministic-inference`` (seeds are honoured)."""
    admin_optional: Any = None
    """``AuthLevel.ADMIN_OPTIONAL``, set on the contract's endpoints for SGLang's key middleware."""
    health_check_prefix: str = "HEALTH_CHECK"

    @property
    def app(self) -> Any:
        """SGLang's module-level FastAPI app."""
        return self.http_server.app

    def tokenizer_manager(self) -> Optional[Any]:
        """The TokenizerManager serving this process, None until SGLang has built it."""
        state = self.http_server.get_global_state()
        return None if state is None else getattr(state, "tokenizer_manager", None)

    def api_keys(self) -> list[str]:
        """Keys the contract accepts, by SGLang's ADMIN_OPTIONAL rule (``utils/auth.py:125-139``):
        the admin key when one is set, otherwise the API key, otherwise none."""
        serving = self.serving()
        admin, key = getattr(serving, "admin_api_key", None), getattr(serving, "api_key", None)
        return [admin] if admin else [key] if key else []


def load_sglang_api() -> SGLangApi:
    """Import the SGLang names the plugin uses from the installed SGLang and check them."""
    try:
        import sglang
        from sglang.srt.entrypoints import http_server
        from sglang.srt.managers import io_struct
        from sglang.srt.managers import tokenizer_manager as tm_module
        from sglang.srt.runtime_context import get_exec, get_serving
        from sglang.srt.utils.auth import AuthLevel
    except ImportError as exc:
        version = _installed_version()
        raise StartupError(
            f"engine_plugins: SGLang {version} lacks a module the plugin needs ({exc}); "
            f"the plugin supports SGLang {SUPPORTED_VERSION}"
        ) from exc
    try:
        from sglang.srt.constants import HEALTH_CHECK_RID_PREFIX
    except ImportError:
        HEALTH_CHECK_RID_PREFIX = "HEALTH_CHECK"

    def deterministic() -> bool:
        return bool(get_exec().deterministic.enable_deterministic_inference)

    api = SGLangApi(
        version=getattr(sglang, "__version__", "unknown"),
        http_server=http_server,
        TokenizerManager=tm_module.TokenizerManager,
        ReqState=tm_module.ReqState,
        GenerateReqInput=io_struct.GenerateReqInput,
        UpdateWeightVersionReqInput=io_struct.UpdateWeightVersionReqInput,
        PauseGenerationReqInput=io_struct.PauseGenerationReqInput,
        ContinueGenerationReqInput=io_struct.ContinueGenerationReqInput,
        serving=get_serving,
        deterministic_inference=deterministic,
        admin_optional=AuthLevel.ADMIN_OPTIONAL,
        health_check_prefix=HEALTH_CHECK_RID_PREFIX,
    )
    check_api(api)
    return api


def check_api(api: SGLangApi) -> None:
    """Raise :class:`StartupError` naming the SGLang version and every name that is missing."""
    missing = [f"TokenizerManager.{name}" for name in TOKENIZER_MANAGER_METHODS if not hasattr(api.TokenizerManager, name)]
    if dataclasses.is_dataclass(api.ReqState):
        fields = {f.name for f in dataclasses.fields(api.ReqState)}
        missing += [f"ReqState.{name}" for name in REQ_STATE_FIELDS if name not in fields]
    else:
        missing.append("ReqState (not a dataclass)")
    missing += [f"http_server.{name}" for name in HTTP_SERVER_NAMES if not hasattr(api.http_server, name)]
    fields = getattr(api.UpdateWeightVersionReqInput, "__struct_fields__", None) or getattr(
        api.UpdateWeightVersionReqInput, "__dataclass_fields__", {}
    )
    if "abort_all_requests" not in fields:
        missing.append("UpdateWeightVersionReqInput.abort_all_requests")
    if missing:
        raise StartupError(
            f"engine_plugins: SGLang {api.version} lacks what the plugin needs: {', '.join(missing)}; "
            f"the plugin supports SGLang {SUPPORTED_VERSION}"
        )


def _installed_version() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return "(not installed)"
