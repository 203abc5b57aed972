"""Every SGLang name the SGLang plugin uses, the supported releases and how they differ: data only.

:data:`MANIFEST` is checked by :mod:`engine_plugins.engines.engine_manifest`: on the installed SGLang at
startup, on each supported release's wheel by the static probe test, and on the objects the
facade (:mod:`.facade`) holds, a fake's included. What each name does in SGLang, with file and
line, is in ``docs/engine-notes.md``.
"""

from __future__ import annotations

from engine_plugins.engines.engine_manifest import EngineManifest
from engine_plugins.engines.probe import EngineName, Feature

# The SGLang releases the plugin supports (every 0.5.23.x included).
LOWEST_VERSION, HIGHEST_VERSION = "0.5.12", "0.5.23"

# Methods of the TokenizerManager class the plugin calls or hooks.
TOKENIZER_MANAGER_METHODS = (
    "__init__",
    "generate_request",
    "_create_tokenized_object",
    "abort_request",
    "pause_generation",
    "continue_generation",
    "get_loads",
)
# Attributes a TokenizerManager sets on itself in __init__: checked on each instance too.
TOKENIZER_MANAGER_ATTRIBUTES = (
    "rid_to_state", "is_pause", "is_pause_cond", "model_config", "context_len",
)
# Fields of the request objects the plugin builds or reads.
REQUEST_FIELDS = {
    "GenerateReqInput": ("rid", "input_ids", "sampling_params", "stream", "return_logprob"),
    "UpdateWeightVersionReqInput": ("new_version", "abort_all_requests"),
    "PauseGenerationReqInput": ("mode",),
    "ContinueGenerationReqInput": (),
}
HTTP_SERVER_NAMES = ("app", "get_global_state", "launch_server")
# The request of each weight-update method (:mod:`.weight_updates`).
WEIGHT_UPDATE_REQUESTS = (
    "UpdateWeightFromDiskReqInput", "UpdateWeightsFromTensorReqInput", "UpdateWeightsFromDistributedReqInput",
    "UpdateWeightsFromIPCReqInput",
)
# The release from which tensor and distributed updates need a weight-update session, and the
# scheduler's flush ignores its waiting queue while paused.
SESSION_VERSION = "0.5.21"
# The data-parallel controller (``--dp-size`` > 1), whose event loop the plugin lets sleep when
# idle: the loop's method, the attributes its body uses, and the module's names it calls.
DP_CONTROLLER_MODULE = "sglang.srt.managers.data_parallel_controller"
DP_CONTROLLER_ATTRIBUTES = ("recv_from_tokenizer", "soft_watchdog", "_request_dispatcher")
# The scheduler, whose abort and choice of the requests its next pass leaves out the plugin hooks
# (:mod:`.scheduler_abort`): the attributes it reads there (and the scheduler's
# ``enable_skip_finishing_decode`` and a request's ``beam_group``, which come with the feature's
# method: 0.5.18 has neither).
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
SCHEDULER_ATTRIBUTES = ("result_queue", "require_mlp_sync")
REQ_ATTRIBUTES = ("to_finish",)
# The module and logger names the facade uses as SGLang spells them.
MODULE_PREFIX = "sglang.srt."
HTTP_SERVER_MODULE = MODULE_PREFIX + "entrypoints.http_server"
TOKENIZER_MANAGER_MODULE = MODULE_PREFIX + "managers.tokenizer_manager"
IO_STRUCT_MODULE = MODULE_PREFIX + "managers.io_struct"
LOAD_SNAPSHOT_MODULE = MODULE_PREFIX + "managers.load_snapshot"
HOOK_REGISTRY_MODULE = MODULE_PREFIX + "plugins.hook_registry"
SERVER_ARGS_LOGGER = MODULE_PREFIX + "entrypoints.engine"
"""The logger of SGLang's engine launcher, which logs the server args at startup."""


def _n(module: str, name: str, *params: str, on_self: bool = False) -> EngineName:
    return EngineName(MODULE_PREFIX + module, name, tuple(params), on_self)


_TM = "managers.tokenizer_manager"
REQUIRED_NAMES: tuple[EngineName, ...] = (
    *(_n("entrypoints.http_server", name) for name in HTTP_SERVER_NAMES),
    *(_n(_TM, f"TokenizerManager.{m}") for m in TOKENIZER_MANAGER_METHODS),
    _n(_TM, "TokenizerManager.generate_request", "obj", "request"),
    _n(_TM, "TokenizerManager.abort_request", "rid", "abort_all"),
    # Where a weight update's version is recorded (the plugin's hook and setter where SGLang
    # keeps no version of its own and no config values, before 0.5.17).
    _n("managers.tokenizer_control_mixin", "TokenizerControlMixin._update_weight_version_if_provided", "weight_version"),
    # The tokens each request has received so far (the weight-version labels where SGLang has none).
    _n(_TM, "ReqState.output_ids"),
    # Where a request is sent to the scheduler: the dispatch mark's hooks where SGLang has none.
    _n(_TM, "TokenizerManager._send_one_request", "tokenized_obj"),
    _n(_TM, "TokenizerManager._send_batch_request", "tokenized_objs"),
    *(_n(_TM, f"TokenizerManager.{a}", on_self=True) for a in TOKENIZER_MANAGER_ATTRIBUTES),
    *(_n("managers.io_struct", f"{cls}.{f}") for cls, fields in REQUEST_FIELDS.items() for f in fields),
    _n("managers.io_struct", "ContinueGenerationReqInput"),
    _n("managers.io_struct", "TokenizedGenerateReqInput.rid"),
    _n("managers.io_struct", "TokenizedGenerateReqInput.extra_key"),
    # Where the plugin labels the tokens (before 0.5.19), each request's tokens are sent as made.
    _n("managers.io_struct", "TokenizedGenerateReqInput.stream"),
    _n("plugins.hook_registry", "HookRegistry.register"),
    _n("plugins.hook_registry", "HookRegistry.apply_hooks"),
    _n("plugins.hook_registry", "HookType.AROUND"),
    _n("plugins.hook_registry", "HookType.AFTER"),
    _n("managers.data_parallel_controller", "DataParallelController.event_loop"),
    *(_n("managers.data_parallel_controller", f"DataParallelController.{a}", on_self=True) for a in DP_CONTROLLER_ATTRIBUTES),
    _n("managers.data_parallel_controller", "zmq"),
    # The scheduler process (:mod:`.scheduler_abort`): its abort, and what its hook reads.
    _n("managers.scheduler", "Scheduler.abort_request", "recv_req"),
    *(_n("managers.scheduler", f"Scheduler.{a}", on_self=True) for a in SCHEDULER_ATTRIBUTES),
    *(_n("managers.schedule_batch", f"Req.{a}", on_self=True) for a in REQ_ATTRIBUTES),
    _n("managers.schedule_batch", "Req.finished"),
    _n("utils.auth", "AuthLevel.ADMIN_OPTIONAL"),
    # Weight updates (:mod:`.weight_updates`): the TokenizerManager's methods (three of them
    # inherited from its control mixin) and the fields of their requests the plugin reads.
    _n(_TM, "TokenizerManager.update_weights_from_disk", "obj", "request"),
    *(_n("managers.tokenizer_control_mixin", f"TokenizerControlMixin.update_weights_from_{kind}", "obj", "request")
      for kind in ("tensor", "distributed", "ipc")),
    _n("managers.tokenizer_control_mixin", "TokenizerControlMixin.init_weights_update_group", "obj", "request"),
    *(_n("managers.io_struct", f"{cls}.{f}") for cls in WEIGHT_UPDATE_REQUESTS for f in ("flush_cache", "weight_version")),
)

# Differences between the supported releases that the startup log names. SGLang's own /get_load
# (removed in 0.5.21) needs no shim: the plugin leaves it as SGLang serves it.
LEGACY_GET_LOAD = "legacy_get_load"
WEIGHT_UPDATE_SESSION = "weight_update_session"
# 0.5.20 on: the TokenizerManager marks each request state dispatched (``ReqState.dispatched``,
# with ``abort_sent``, which de-duplicates aborts), and its failure path aborts dispatched requests.
DISPATCH_MARK = "dispatch_mark"
ABORT_ON_CLOSE = "abort_on_close"
# 0.5.19 on: the engine keeps the weight version (the scheduler labels each request's tokens
# with it, ``meta_info.weight_versions``); before, only the TokenizerManager's config value.
ENGINE_WEIGHT_VERSION = "engine_weight_version"
# 0.5.22 on: the scheduler leaves the requests its queued results finish out of the pass it plans.
ABORT_WITHOUT_LAST_PASS = "abort_without_last_pass"
# 0.5.17 on: the TokenizerManager's config values (``config_value``, ``record_config_updates``,
# where the weight version is kept before 0.5.19) and the runtime context's accessors
# (``get_exec``, ``get_serving``, ``get_device``); before, both are the ``ServerArgs``.
CONFIG_VALUES = "config_values"
RUNTIME_CONTEXT = "runtime_context"
# 0.5.17 only: ``abort_request`` marks request states ``abort_requested``, and a marked request
# raises ``RequestAbortedError`` (a ``ValueError``) at its next check before dispatch.
MARKED_ABORTS = "marked_aborts"
# 0.5.17 only: an ``n > 1`` request keeps its logical state beside one child state per sample
# (``_init_child_req_state``, ``child_rid_to_logical_rid``); the logical one is never dispatched.
LOGICAL_STATES = "logical_states"
# 0.5.16 on: the TokenizerManager keeps ``--incremental-streaming-output`` on itself; before, only
# its ``ServerArgs`` have it.
STREAMING_FLAG = "streaming_flag"
# 0.5.13 on: the schedulers' loads are ``LoadSnapshot`` structs (``to_dict``); before,
# ``io_struct.GetLoadsReqOutput`` dataclasses, which SGLang's own ``/v1/loads`` turns into the same
# JSON with ``dataclasses.asdict`` (no ``None`` values, no ``timestamp``).
LOAD_SNAPSHOTS = "load_snapshots"
# 0.5.19 on: SGLang's own ``/v1/loads`` reads the parallel sizes (``dp_size``,
# ``enable_dp_attention``) from the runtime context's ``get_parallel()``; before, from the
# TokenizerManager's ``ServerArgs`` (0.5.14 to 0.5.16 have a ``get_parallel`` without those fields,
# 0.5.12 and 0.5.13 none).
PARALLEL_CONTEXT = "parallel_context"
# 0.5.15 on: the DP controller receives with ``sock_recv``; before, ``recv_pyobj`` on its socket.
SOCK_RECV = "sock_recv"
FEATURES: tuple[Feature, ...] = (
    Feature(ENGINE_WEIGHT_VERSION, _n(_TM, "TokenizerManager.update_weight_version", "obj"),
            "weight version: set by the plugin in SGLang's config value, each request's tokens labelled with the "
            "version in force as they arrive (meta_info.weight_versions as on 0.5.19)"),
    Feature(DISPATCH_MARK, _n(_TM, "TokenizerManager._mark_state_dispatched"),
            "dispatch mark: hooks after _send_one_request and _send_batch_request mark each request dispatched"),
    Feature(ABORT_ON_CLOSE, _n(_TM, "TokenizerManager._release_req_states_on_failure"),
            "a request closed early is aborted by the plugin first (SGLang only drops its state)"),
    Feature(LEGACY_GET_LOAD, _n("entrypoints.http_server", "get_load"), "SGLang's own /get_load served as before",
            on_presence=True),
    Feature(WEIGHT_UPDATE_SESSION, _n("managers.io_struct", "BeginWeightUpdateReqInput"),
            "sessionless tensor and distributed weight updates get a session from the plugin", on_presence=True),
    Feature(ABORT_WITHOUT_LAST_PASS, _n("managers.scheduler", "Scheduler._reqs_finishing_inflight", "batch"),
            "an aborted running request ends without one more decode pass (a hook in the scheduler)", on_presence=True),
    Feature(CONFIG_VALUES, _n(_TM, "TokenizerManager.record_config_updates", "source"),
            "weight version kept in the server args (read there, set and hooked through "
            "_update_weight_version_if_provided)"),
    Feature(RUNTIME_CONTEXT, _n("runtime_context", "get_serving"),
            "API keys, deterministic inference and --sleep-on-idle read from the server args"),
    Feature(MARKED_ABORTS, _n(_TM, "RequestAbortedError"),
            "a request SGLang's abort marked before dispatch answers as aborted, not with RequestAbortedError",
            on_presence=True),
    Feature(LOGICAL_STATES, _n(_TM, "TokenizerManager._init_child_req_state", "logical_rid", "obj"),
            "an n > 1 request's logical state counts as dispatched once its first sample is", on_presence=True),
    Feature(STREAMING_FLAG, _n(_TM, "TokenizerManager.incremental_streaming_output", on_self=True),
            "--incremental-streaming-output read from the server args"),
    Feature(LOAD_SNAPSHOTS, _n("managers.load_snapshot", "LoadSnapshot.to_dict"),
            "/v1/loads' per-rank figures read from SGLang's GetLoadsReqOutput dataclasses"),
    Feature(PARALLEL_CONTEXT, _n("entrypoints.v1_loads", "get_parallel"),
            "data-parallel sizes (/v1/loads, weight updates) read from the server args"),
    Feature(SOCK_RECV, _n("managers.data_parallel_controller", "sock_recv"),
            "the data-parallel controller's idle wait receives with recv_pyobj"),
)

_MARKED = {DISPATCH_MARK: True, ABORT_ON_CLOSE: True, ENGINE_WEIGHT_VERSION: True}
_UNMARKED = {DISPATCH_MARK: False, ABORT_ON_CLOSE: False, ENGINE_WEIGHT_VERSION: True}
_UNVERSIONED = {**_UNMARKED, ENGINE_WEIGHT_VERSION: False}
_BEFORE_SESSIONS = {LEGACY_GET_LOAD: True, WEIGHT_UPDATE_SESSION: False, **_MARKED}
_WITH_SESSIONS = {LEGACY_GET_LOAD: False, WEIGHT_UPDATE_SESSION: True, **_MARKED}
# What every release from 0.5.19 has of the features 0.5.12 to 0.5.18 differ in.
_COMMON = {MARKED_ABORTS: False, LOGICAL_STATES: False, CONFIG_VALUES: True, RUNTIME_CONTEXT: True, STREAMING_FLAG: True,
           LOAD_SNAPSHOTS: True, PARALLEL_CONTEXT: True, SOCK_RECV: True}
# What 0.5.12 to 0.5.18 lack of it (0.5.15 to 0.5.18 lack only the parallel sizes in the context).
_SERVER_ARGS = {**_COMMON, CONFIG_VALUES: False, RUNTIME_CONTEXT: False, STREAMING_FLAG: False, PARALLEL_CONTEXT: False}
_BEFORE_SOCK_RECV = {**_SERVER_ARGS, SOCK_RECV: False}

MANIFEST = EngineManifest(
    engine="SGLang",
    distributions=("sglang",),
    lowest=LOWEST_VERSION,
    highest=HIGHEST_VERSION,
    required=REQUIRED_NAMES,
    features=FEATURES,
    releases={"0.5.12": {**_BEFORE_SESSIONS, **_UNVERSIONED, ABORT_WITHOUT_LAST_PASS: False, **_BEFORE_SOCK_RECV,
                         LOAD_SNAPSHOTS: False},
              "0.5.13": {**_BEFORE_SESSIONS, **_UNVERSIONED, ABORT_WITHOUT_LAST_PASS: False, **_BEFORE_SOCK_RECV},
              "0.5.14": {**_BEFORE_SESSIONS, **_UNVERSIONED, ABORT_WITHOUT_LAST_PASS: False, **_BEFORE_SOCK_RECV},
              "0.5.15": {**_BEFORE_SESSIONS, **_UNVERSIONED, ABORT_WITHOUT_LAST_PASS: False, **_SERVER_ARGS},
              "0.5.16": {**_BEFORE_SESSIONS, **_UNVERSIONED, ABORT_WITHOUT_LAST_PASS: False, **_SERVER_ARGS,
                         STREAMING_FLAG: True},
              "0.5.17": {**_BEFORE_SESSIONS, **_UNVERSIONED, ABORT_WITHOUT_LAST_PASS: False, **_COMMON,
                         PARALLEL_CONTEXT: False, MARKED_ABORTS: True, LOGICAL_STATES: True},
              "0.5.18": {**_BEFORE_SESSIONS, **_UNVERSIONED, ABORT_WITHOUT_LAST_PASS: False, **_COMMON,
                         PARALLEL_CONTEXT: False},
              "0.5.19": {**_BEFORE_SESSIONS, **_UNMARKED, ABORT_WITHOUT_LAST_PASS: False, **_COMMON},
              "0.5.20": {**_BEFORE_SESSIONS, ABORT_WITHOUT_LAST_PASS: False, **_COMMON},
              "0.5.21": {**_WITH_SESSIONS, ABORT_WITHOUT_LAST_PASS: False, **_COMMON},
              "0.5.22": {**_WITH_SESSIONS, ABORT_WITHOUT_LAST_PASS: True, **_COMMON},
              "0.5.23": {**_WITH_SESSIONS, ABORT_WITHOUT_LAST_PASS: True, **_COMMON}},
)
