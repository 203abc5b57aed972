"""The SGLang facade: every SGLang object the plugin touches, reached through these classes.

- :class:`SGLangNames`: what the plugin imports from SGLang (request classes, the HTTP server
  module, the hook registry, config accessors), with the shims between releases.
  :func:`load_names` imports them from the installed SGLang after the startup check of
  :data:`~.manifest.MANIFEST`, and :func:`check_names` checks the objects it holds against the
  same manifest (a fake's too).
- :class:`SGLangEngine`: one TokenizerManager. Every attribute the plugin reads, writes or
  calls on SGLang's objects (the TokenizerManager, its request states, the requests it builds
  or sees) goes through it; its constructor checks the TokenizerManager's own attributes, when
  SGLang constructs it at startup.

The names themselves and the supported releases are in :mod:`.manifest`; the code that runs in
SGLang's data-parallel controller process is in :mod:`.dp_controller`. A check failure is a
:class:`~engine_plugins.contract.errors.StartupError` naming what is missing and the SGLang version.
Tests build :class:`SGLangNames` from a fake SGLang without SGLang installed.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any, AsyncIterator, Callable, Optional

from engine_plugins.engines.engine_manifest import at_least, missing_attributes
from engine_plugins.core.model_limits import ModelLimits
from engine_plugins.engines.sglang import call_context
from engine_plugins.engines.sglang.manifest import (
    ABORT_ON_CLOSE,
    CONFIG_VALUES,
    DISPATCH_MARK,
    ENGINE_WEIGHT_VERSION,
    HOOK_REGISTRY_MODULE,
    HTTP_SERVER_MODULE,
    IO_STRUCT_MODULE,
    LOAD_SNAPSHOT_MODULE,
    LOAD_SNAPSHOTS,
    LOGICAL_STATES,
    MANIFEST,
    MARKED_ABORTS,
    PARALLEL_CONTEXT,
    RUNTIME_CONTEXT,
    SERVER_ARGS_LOGGER,
    SESSION_VERSION,
    STREAMING_FLAG,
    TOKENIZER_MANAGER_ATTRIBUTES,
    TOKENIZER_MANAGER_MODULE,
)


@dataclass
class SGLangNames:
    """The SGLang names the plugin uses; built from the real SGLang or from a fake."""

    version: str
    http_server: ModuleType
    """``sglang.srt.entrypoints.http_server``: ``app``, ``get_global_state``, ``launch_server``."""
    TokenizerManager: type
    ReqState: type
    LoadSnapshot: Optional[type]
    """The schedulers' per-rank loads (0.5.13 on); None where they are ``GetLoadsReqOutput`` dataclasses."""
    GenerateReqInput: type
    UpdateWeightVersionReqInput: type
    PauseGenerationReqInput: type
    ContinueGenerationReqInput: type
    HookRegistry: Any
    """SGLang's registry of method hooks; it applies them after every plugin has loaded."""
    HookType: Any
    serving: Callable[[], Any]
    """SGLang's ``get_serving()`` config bag: ``api_key``, ``admin_api_key``."""
    deterministic_inference: Callable[[], bool]
    """Whether the server runs with ``--enable-deterministic-inference`` (seeds are honoured)."""
    admin_optional: Any = None
    """``AuthLevel.ADMIN_OPTIONAL``, set on the contract's endpoints for SGLang's key middleware."""
    health_check_prefix: str = "HEALTH_CHECK"
    loads_header: Callable[[], dict] = dict
    """The top-level fields of SGLang's own ``/v1/loads`` besides ``timestamp`` and ``version``
    (``accelerator``, ``num_accelerators``), made by SGLang's own helpers; ``{}`` when absent."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """How this version differs where the plugin looks (the startup log's line)."""
    BeginWeightUpdateReqInput: Optional[type] = None
    """SGLang 0.5.21+'s weight-update session requests; None before."""
    EndWeightUpdateReqInput: Optional[type] = None
    parallel: Callable[[], Any] = lambda: None
    """Where SGLang's own ``/v1/loads`` reads the parallel sizes (``tp_size``, ``pp_size``,
    ``dp_size``, ``enable_dp_attention``): ``get_parallel()`` (0.5.19 on), else the
    TokenizerManager's server args; None where unknown."""
    dispatch_mark: bool = True
    """The TokenizerManager marks each request state dispatched (``_mark_state_dispatched``,
    ``ReqState.dispatched`` and ``abort_sent``: 0.5.20 on); else the plugin hooks the sends."""
    aborts_on_close: bool = True
    """A closed ``generate_request`` aborts its dispatched requests (0.5.20 on); before, SGLang
    only drops their states, and the plugin aborts them first."""
    engine_weight_version: bool = True
    """SGLang keeps the weight version and labels each request's tokens with it
    (``TokenizerManager.update_weight_version``, 0.5.19 on); before, the plugin sets the
    TokenizerManager's config value and counts the labels (:mod:`.version_labels`)."""
    config_values: bool = True
    """The TokenizerManager keeps the weight version among its config values (``config_value``,
    ``record_config_updates``: 0.5.17 on); before, in its ``ServerArgs`` (``weight_version``, set
    by ``override``)."""
    streaming_flag: bool = True
    """The TokenizerManager has ``incremental_streaming_output`` (0.5.16 on); before, only its
    ``ServerArgs`` have it."""
    RequestAbortedError: Optional[type] = None
    """SGLang 0.5.17's error (a ``ValueError``) for a request its abort marked
    (``ReqState.abort_requested``) before dispatch; None where its abort marks nothing."""
    logical_states: bool = False
    """An ``n > 1`` request keeps a logical state beside its samples' (0.5.17): the sample's
    ``child_rid_to_logical_rid`` names it."""
    load_snapshots: bool = True
    """``get_loads`` returns ``LoadSnapshot`` structs (0.5.13 on); before, dataclasses."""
    internal_modules: tuple[str, ...] = ("sglang.srt.managers.",)
    """The modules of SGLang's own machinery (:meth:`called_by_sglang`); a fake names its own."""

    @property
    def app(self) -> Any:
        """SGLang's module-level FastAPI app."""
        return self.http_server.app

    def engine_objects(self) -> dict[str, Any]:
        """The SGLang objects held here, by the module SGLang defines them in (the HTTP server
        module whole, the rest by the classes held), as the manifest's check reads them."""
        return {
            HTTP_SERVER_MODULE: self.http_server,
            TOKENIZER_MANAGER_MODULE: SimpleNamespace(TokenizerManager=self.TokenizerManager, ReqState=self.ReqState),
            IO_STRUCT_MODULE: SimpleNamespace(
                GenerateReqInput=self.GenerateReqInput, UpdateWeightVersionReqInput=self.UpdateWeightVersionReqInput,
                PauseGenerationReqInput=self.PauseGenerationReqInput,
                ContinueGenerationReqInput=self.ContinueGenerationReqInput),
            HOOK_REGISTRY_MODULE: SimpleNamespace(HookRegistry=self.HookRegistry, HookType=self.HookType),
            **({LOAD_SNAPSHOT_MODULE: SimpleNamespace(LoadSnapshot=self.LoadSnapshot)} if self.LoadSnapshot else {}),
        }

    def rank_load(self, load: Any) -> dict:
        """One rank's figures from ``get_loads`` as SGLang's own ``/v1/loads`` writes them: a
        ``LoadSnapshot``'s ``to_dict``, or before 0.5.13 the dataclass without its ``None``
        fields and its ``timestamp`` (0.5.12 ``entrypoints/v1_loads.py``)."""
        if self.load_snapshots:
            return load.to_dict(None)
        return dataclasses.asdict(load, dict_factory=_without_none_or_timestamp)

    def tokenizer_manager(self) -> Optional[Any]:
        """The TokenizerManager a contract call is about, None until SGLang has built one: the one
        a hook is running on, else the one SGLang's HTTP server serves (its global state), else the
        last one built in this process (an in-process ``sglang.Engine``'s, in no global state)."""
        tm = call_context.acted_on()
        if tm is not None:
            return tm
        state = self.http_server.get_global_state()
        tm = None if state is None else getattr(state, "tokenizer_manager", None)
        return tm if tm is not None else call_context.last_built()

    def called_by_sglang(self) -> bool:
        """Whether the hooked method whose hook calls this was called by SGLang's own machinery
        (its managers: the TokenizerManager's own pause loop, weight updates, a disconnected
        client), not by a route or a caller's code. Read past the hook's own frames and the hook
        registry's wrapper."""
        frame = sys._getframe(1)
        skipped = (frame.f_globals.get("__name__"), getattr(self.HookRegistry, "__module__", None))
        while frame is not None and frame.f_globals.get("__name__") in skipped:
            frame = frame.f_back
        module = "" if frame is None else frame.f_globals.get("__name__", "")
        return module.startswith(self.internal_modules)

    def mark_admin_optional(self, endpoint: Any) -> None:
        """Give *endpoint* SGLang's ``ADMIN_OPTIONAL`` auth level, which SGLang's key middleware reads."""
        endpoint._auth_level = self.admin_optional

    def api_keys(self) -> list[str]:
        """Keys the contract accepts, by SGLang's ADMIN_OPTIONAL rule: the admin key when one is
        set, otherwise the API key, otherwise none."""
        serving = self.serving()
        admin, key = getattr(serving, "admin_api_key", None), getattr(serving, "api_key", None)
        return [admin] if admin else [key] if key else []

    # --- hooks, through SGLang's own registry (so that SGLang's log names the plugin) ----------

    def hook_tokenizer_manager(self, method: str, hook: Callable, kind: str = "AROUND") -> None:
        """Register *hook* on ``TokenizerManager.<method>`` (``AROUND``: ``hook(original, self, ...)``;
        ``AFTER``: ``hook(result, self, ...)``)."""
        cls = self.TokenizerManager
        self.HookRegistry.register(f"{cls.__module__}.{cls.__qualname__}.{method}", hook, getattr(self.HookType, kind))

    def dispatch_hooks(self, dispatched: Callable[[Any, str], None]) -> dict[str, tuple[Callable, str]]:
        """The hooks that tell *dispatched(tm, rid)* each request SGLang has sent to the
        scheduler, by the method each hooks and its kind: an AROUND hook on the TokenizerManager's
        own mark where it has one, else AFTER hooks on the two sends (synchronous before 0.5.20,
        with no await between the send and the hook)."""
        if self.dispatch_mark:
            def mark_state_dispatched(original: Any, tm: Any, rid: str) -> None:
                original(tm, rid)
                dispatched(tm, rid)

            return {"_mark_state_dispatched": (mark_state_dispatched, "AROUND")}

        def sent_one(result: Any, tm: Any, tokenized_obj: Any, *args: Any, **kwargs: Any) -> None:
            dispatched(tm, tokenized_obj.rid)

        def sent_batch(result: Any, tm: Any, tokenized_objs: Any, *args: Any, **kwargs: Any) -> None:
            for tokenized_obj in tokenized_objs:
                dispatched(tm, tokenized_obj.rid)

        return {"_send_one_request": (sent_one, "AFTER"), "_send_batch_request": (sent_batch, "AFTER")}

    def weight_version_hooks(self, changing: Callable[[Any, str], None]) -> dict[str, tuple[Callable, str]]:
        """Where SGLang labels no tokens (before 0.5.19): an AROUND hook on the TokenizerManager's
        ``record_config_updates`` that tells *changing(tm, new_version)* of every change of the
        weight version before it is made, whoever makes it (the plugin, SGLang's own
        ``/update_weight_version`` route, a weight update's ``weight_version``). None from 0.5.19."""
        if self.engine_weight_version:
            return {}
        if not self.config_values:
            # Before 0.5.17 a weight update records its version through this method (on the
            # server args), and the plugin sets it through it too (SGLangEngine.set_weight_version).
            def update_weight_version_if_provided(original: Any, tm: Any, weight_version: Any) -> Any:
                if weight_version is not None:
                    changing(tm, str(weight_version))
                return original(tm, weight_version)

            return {"_update_weight_version_if_provided": (update_weight_version_if_provided, "AROUND")}

        def record_config_updates(original: Any, tm: Any, source: str, **fields: Any) -> Any:
            if fields.get("weight_version") is not None:
                changing(tm, str(fields["weight_version"]))
            return original(tm, source, **fields)

        return {"record_config_updates": (record_config_updates, "AROUND")}

    def tokenizer_manager_method(self, method: str) -> Any:
        """``TokenizerManager.<method>`` as the class holds it now (hooked or not)."""
        return getattr(self.TokenizerManager, method, None)

    def hook_launch_server(self, hook: Callable) -> None:
        """Register an AROUND *hook* on ``http_server.launch_server``: ``hook(original, server_args, ...)``."""
        self.HookRegistry.register(f"{self.http_server.__name__}.launch_server", hook, self.HookType.AROUND)

    @staticmethod
    def tokenizer_worker_num(server_args: Any) -> int:
        """``--tokenizer-worker-num`` of the server about to launch."""
        return getattr(server_args, "tokenizer_worker_num", 1) or 1

    SERVER_ARGS_LOGGER = SERVER_ARGS_LOGGER

    @staticmethod
    def serving_address(server_args: Any) -> tuple[Optional[str], list[str]]:
        """``--host`` of the server about to launch, and its ``--api-key`` and ``--admin-api-key``."""
        keys = [getattr(server_args, "api_key", None), getattr(server_args, "admin_api_key", None)]
        return getattr(server_args, "host", None), [k for k in keys if k]

    # --- the objects SGLang hands to the hooks --------------------------------------------------

    @staticmethod
    def request_rid(obj: Any) -> Any:
        """A ``GenerateReqInput``'s rid: a string, or a list for a batch."""
        return obj.rid

    @staticmethod
    def scope_prefix_cache(tokenized: Any, salt_of: Callable[[str, Optional[str]], Optional[str]]) -> None:
        """Give a tokenized request (``TokenizedGenerateReqInput``; embedding requests have no
        prefix-cache key to scope) the ``extra_key`` *salt_of(rid, its extra_key)* returns, unless None."""
        if not hasattr(tokenized, "extra_key"):
            return
        salt = salt_of(tokenized.rid, tokenized.extra_key)
        if salt is not None:
            tokenized.extra_key = salt

    def send_every_token(self, tokenized: Any) -> None:
        """Where the plugin labels the tokens (before 0.5.19), have the scheduler send a
        non-streaming request's tokens as it makes them, not every 50: a token is labelled when it
        reaches the TokenizerManager, and 49 tokens made before a version change would otherwise
        arrive after it. The request's answer is unchanged (the TokenizerManager reads ``stream``
        from the request, not from the tokenized object); the cost is the streamed requests' one
        output per step."""
        if not self.engine_weight_version and hasattr(tokenized, "stream"):
            tokenized.stream = True

    # --- weight updates (:mod:`.weight_updates`) ------------------------------------------------

    @staticmethod
    def take_weight_version(obj: Any) -> Optional[str]:
        """The ``weight_version`` a weight-update request carries, taken off it (the plugin
        bumps to it once the weights are loaded)."""
        version = getattr(obj, "weight_version", None)
        if version is not None:
            obj.weight_version = None
        return version

    @staticmethod
    def wants_flush(obj: Any) -> bool:
        """Whether a weight-update request asks SGLang to flush its cache after loading."""
        return bool(getattr(obj, "flush_cache", False))

    @staticmethod
    def set_flush(obj: Any, flush: bool) -> None:
        """Whether SGLang flushes its cache after this weight update's load."""
        obj.flush_cache = flush

    def flushes_while_retracted(self) -> bool:
        """Whether the scheduler flushes under a ``retract`` pause with requests waiting (0.5.21+)."""
        return at_least(self.version, SESSION_VERSION)

    def replicas(self) -> int:
        """Data-parallel replicas (plain ``--dp-size``, not DP attention), which SGLang's tensor,
        distributed and IPC weight updates refuse."""
        parallel = self.parallel()
        if parallel is None or getattr(parallel, "enable_dp_attention", False):
            return 1
        return int(getattr(parallel, "dp_size", 1) or 1)

    def has_weight_update_session(self) -> bool:
        """Whether this SGLang has (and needs for tensor and distributed updates) a weight-update session."""
        return self.BeginWeightUpdateReqInput is not None

    async def begin_weight_update(self, tm: Any, request: Any) -> tuple:
        """The TokenizerManager's ``begin_weight_update``: a session over every model runner."""
        return await tm.begin_weight_update(self.BeginWeightUpdateReqInput(), request)

    async def end_weight_update(self, tm: Any, request: Any) -> tuple:
        """The TokenizerManager's ``end_weight_update``."""
        return await tm.end_weight_update(self.EndWeightUpdateReqInput(), request)

    @staticmethod
    def update_answer(method: str, success: bool, message: str) -> tuple:
        """A weight-update method's answer: ``(success, message)``, and for the disk update the
        count of paused requests too (SGLang's route reads all three)."""
        return (success, message, 0) if method == "update_weights_from_disk" else (success, message)

    @staticmethod
    def with_message(answer: tuple, message: str) -> tuple:
        """SGLang's weight-update answer with *message* in place of its own."""
        return (answer[0], message, *answer[2:])

    @staticmethod
    def wants_logprobs(obj: Any) -> bool:
        """Whether a ``GenerateReqInput`` asked for logprobs."""
        return bool(getattr(obj, "return_logprob", False))

    def marked_abort(self, exc: BaseException, obj: Any) -> bool:
        """Whether *exc*, raised before a single request's first output, is SGLang's answer to its
        own abort of the request before dispatch (0.5.17's ``RequestAbortedError``)."""
        return (self.RequestAbortedError is not None and isinstance(exc, self.RequestAbortedError)
                and isinstance(self.request_rid(obj), str))

    @staticmethod
    def state_dispatched(state: Any) -> bool:
        """Whether a ``ReqState`` has been sent to the scheduler."""
        return bool(getattr(state, "dispatched", False))

    @staticmethod
    def pause_mode(obj: Any) -> Optional[str]:
        """A ``PauseGenerationReqInput``'s mode: ``abort``, ``retract`` or ``in_place``."""
        return getattr(obj, "mode", None)


def _without_none_or_timestamp(items: list[tuple[str, Any]]) -> dict:
    """``dataclasses.asdict``'s factory as SGLang 0.5.12's ``/v1/loads`` gives it (``_loads_dict_factory``)."""
    return {k: v for k, v in items if v is not None and k != "timestamp"}


def load_names() -> SGLangNames:
    """Import the SGLang names the plugin uses from the installed SGLang and check them."""
    report = MANIFEST.check_installed()
    try:
        import sglang
        from sglang.srt.entrypoints import http_server
        from sglang.srt.managers import io_struct
        from sglang.srt.managers import tokenizer_manager as tm_module
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
        from sglang.srt.utils.auth import AuthLevel
    except ImportError as exc:
        raise MANIFEST.import_error(MANIFEST.installed_version(), exc) from exc
    try:
        from sglang.srt.constants import HEALTH_CHECK_RID_PREFIX
    except ImportError:
        HEALTH_CHECK_RID_PREFIX = "HEALTH_CHECK"

    def server_args() -> Any:
        # The TokenizerManager's, read once the seam exists (so the TokenizerManager does): the
        # server's, or an in-process engine's (``names`` is bound below, before any call).
        return names.tokenizer_manager().server_args

    if report.features[RUNTIME_CONTEXT]:
        from sglang.srt.runtime_context import get_exec, get_serving

        def deterministic() -> bool:
            return bool(get_exec().deterministic.enable_deterministic_inference)
    else:
        # Before 0.5.17 the same fields are the server args'.
        get_serving = server_args

        def deterministic() -> bool:
            return bool(get_serving().enable_deterministic_inference)

    # Where SGLang's own /v1/loads reads the parallel sizes (docs/engine-notes.md).
    if report.features[PARALLEL_CONTEXT]:
        from sglang.srt.runtime_context import get_parallel as parallel
    else:
        parallel = server_args

    try:
        from sglang.srt.entrypoints import v1_loads

        # Before 0.5.21 the helper takes the parallel sizes as arguments (docs/engine-notes.md).
        takes_sizes = bool(inspect.signature(v1_loads._num_accelerators_per_dp_rank).parameters)

        def loads_header() -> dict:
            # As SGLang's own /v1/loads computes them (accelerator is None without one).
            if takes_sizes:
                p = parallel()
                accelerators = v1_loads._num_accelerators_per_dp_rank(p.tp_size, p.pp_size, p.dp_size, p.enable_dp_attention)
            else:
                accelerators = v1_loads._num_accelerators_per_dp_rank()
            return {"accelerator": v1_loads._accelerator_name(), "num_accelerators": accelerators}
    except (ImportError, AttributeError):
        # 0.5.12 to 0.5.16's /v1/loads has neither helper, nor those fields (docs/engine-notes.md).
        loads_header = dict
    if report.features[LOAD_SNAPSHOTS]:
        from sglang.srt.managers.load_snapshot import LoadSnapshot
    else:
        LoadSnapshot = None

    names = SGLangNames(
        version=getattr(sglang, "__version__", "unknown"),
        http_server=http_server,
        TokenizerManager=tm_module.TokenizerManager,
        ReqState=tm_module.ReqState,
        LoadSnapshot=LoadSnapshot,
        GenerateReqInput=io_struct.GenerateReqInput,
        UpdateWeightVersionReqInput=io_struct.UpdateWeightVersionReqInput,
        PauseGenerationReqInput=io_struct.PauseGenerationReqInput,
        ContinueGenerationReqInput=io_struct.ContinueGenerationReqInput,
        HookRegistry=HookRegistry,
        HookType=HookType,
        serving=get_serving,
        deterministic_inference=deterministic,
        admin_optional=AuthLevel.ADMIN_OPTIONAL,
        health_check_prefix=HEALTH_CHECK_RID_PREFIX,
        loads_header=loads_header,
        notes=MANIFEST.shims(report),
        dispatch_mark=report.features[DISPATCH_MARK],
        aborts_on_close=report.features[ABORT_ON_CLOSE],
        engine_weight_version=report.features[ENGINE_WEIGHT_VERSION],
        config_values=report.features[CONFIG_VALUES],
        streaming_flag=report.features[STREAMING_FLAG],
        RequestAbortedError=getattr(tm_module, "RequestAbortedError", None) if report.features[MARKED_ABORTS] else None,
        logical_states=report.features[LOGICAL_STATES],
        load_snapshots=report.features[LOAD_SNAPSHOTS],
        BeginWeightUpdateReqInput=getattr(io_struct, "BeginWeightUpdateReqInput", None),
        EndWeightUpdateReqInput=getattr(io_struct, "EndWeightUpdateReqInput", None),
        parallel=parallel,
    )
    check_names(names)
    return names


def check_names(names: SGLangNames) -> None:
    """Raise :class:`StartupError` naming the SGLang version when it lies outside the supported
    range, or when an object *names* holds lacks a name of :data:`~.manifest.MANIFEST`."""
    MANIFEST.check_objects(names.version, names.engine_objects())


class SGLangEngine:
    """One SGLang TokenizerManager, through the names the plugin uses.

    Constructed when SGLang constructs the TokenizerManager (or on first use), it checks the
    attributes a TokenizerManager sets on itself, which a class cannot show.
    """

    def __init__(self, names: SGLangNames, tm: Any) -> None:
        missing = missing_attributes(tm, TOKENIZER_MANAGER_ATTRIBUTES)
        if missing:
            raise MANIFEST.missing_error(names.version, [f"TokenizerManager.{a}" for a in missing])
        self.names = names
        self.tm = tm

    # --- requests ---------------------------------------------------------------------------

    def model_limits(self) -> ModelLimits:
        """The model's vocabulary (its embedding's rows) and the context length SGLang serves."""
        return ModelLimits(int(self.tm.model_config.vocab_size), int(self.tm.context_len))

    def out_of_vocabulary(self, obj: Any) -> Optional[str]:
        """Why a native ``GenerateReqInput``'s token ids cannot reach the model, or None.

        SGLang passes ``input_ids`` to the embedding unchecked, and one id past the vocabulary
        kills the scheduler (and every request on the server). ``input_ids`` is None for text
        prompts, a list of ids, or a list of such lists for a batch.
        """
        ids = getattr(obj, "input_ids", None)
        if not ids:
            return None
        top = self.model_limits().vocab_size - 1
        prompts = ids if isinstance(ids[0], list) else [ids]
        for p, prompt in enumerate(prompts):
            for i, token in enumerate(prompt):
                if not (isinstance(token, int) and 0 <= token <= top):
                    where = f"input_ids[{p}][{i}]" if prompts is ids else f"input_ids[{i}]"
                    return f"{where} = {token!r} is outside the model's vocabulary (token ids 0 to {top})"
        return None

    def generate(self, rid: str, input_ids: list[int], sampling_params: dict) -> AsyncIterator[dict]:
        """SGLang's ``generate_request`` for token ids, streamed, with logprobs."""
        obj = self.names.GenerateReqInput(
            input_ids=list(input_ids), sampling_params=sampling_params, rid=rid, stream=True, return_logprob=True
        )
        return self.tm.generate_request(obj, None)

    def incremental_streaming(self) -> bool:
        """Whether stream chunks are deltas (``--incremental-streaming-output``)."""
        owner = self.tm if self.names.streaming_flag else self.tm.server_args
        return bool(owner.incremental_streaming_output)

    def rids(self) -> list[str]:
        """The rids whose state SGLang holds."""
        return list(self.tm.rid_to_state)

    def logical_rid(self, rid: str) -> Optional[str]:
        """The rid of the ``n > 1`` request whose sample *rid* is, where SGLang keeps a logical
        state beside the samples' (0.5.17); else None."""
        if not self.names.logical_states:
            return None
        return getattr(self.tm, "child_rid_to_logical_rid", {}).get(rid)

    def holds(self, rid: str) -> bool:
        """Whether SGLang holds a state for *rid*."""
        return rid in self.tm.rid_to_state

    def drop_state(self, rid: str) -> None:
        """Delete *rid*'s request state if SGLang still holds it (a request that ended before
        dispatch, whose state some releases leave behind: :meth:`.tracking.Tracker.drop_undispatched`)."""
        self.tm.rid_to_state.pop(rid, None)

    def replace_request_states(self, make: Callable[[dict], dict]) -> None:
        """Swap ``rid_to_state`` for ``make(rid_to_state)`` (a dict that reports changes)."""
        self.tm.rid_to_state = make(self.tm.rid_to_state)

    def abort(self, rid: str) -> None:
        """SGLang's abort of *rid*, sent even if one was sent before: SGLang sends one abort per
        request state, and one sent while the request was held reached a scheduler that did not
        know it yet. (Before 0.5.20 SGLang sends every abort: no ``abort_sent`` to reset.)"""
        state = self.tm.rid_to_state.get(rid)
        if state is not None and self.names.dispatch_mark:
            state.abort_sent = False
        with call_context.own_call():
            self.tm.abort_request(rid)

    def abort_all(self) -> None:
        """SGLang's abort of every request: one message, where one per request costs the
        scheduler a scan of its queues each (``docs/engine-notes.md``, "The scheduler and outputs")."""
        with call_context.own_call():
            self.tm.abort_request(abort_all=True)

    def weight_version(self) -> str:
        """The version SGLang stamps on new tokens (before 0.5.17, its server args')."""
        if not self.names.config_values:
            return str(self.tm.server_args.weight_version)
        return str(self.tm.config_value("weight_version"))

    async def set_weight_version(self, version: str) -> None:
        """SGLang's version update, without its abort of every request. Before 0.5.19, where
        SGLang has none, the TokenizerManager's config value, as its own route sets it."""
        if not self.names.engine_weight_version:
            if not self.names.config_values:
                # Through the method the plugin hooks there (SGLang's route calls the server
                # args' override directly, but the contract's route replaces it).
                self.tm._update_weight_version_if_provided(version)
            else:
                self.tm.record_config_updates("http.update_weight_version", weight_version=version)
            return
        with call_context.own_call():
            updated = self.tm.update_weight_version(
                self.names.UpdateWeightVersionReqInput(new_version=version, abort_all_requests=False)
            )
        await updated

    def output_tokens(self) -> dict[str, int]:
        """How many output tokens each request SGLang holds has received so far, by rid."""
        return {rid: len(state.output_ids) for rid, state in self.tm.rid_to_state.items()}

    async def rank_loads(self) -> list[dict]:
        """SGLang's ``/v1/loads`` figures per DP rank, every field kept."""
        return [self.names.rank_load(load) for load in await self.tm.get_loads()]

    # --- pause ------------------------------------------------------------------------------

    async def pause_generation(self, mode: str) -> None:
        """SGLang's ``pause_generation`` in *mode* (``in_place`` or ``retract``)."""
        with call_context.own_call():
            paused = self.tm.pause_generation(self.names.PauseGenerationReqInput(mode=mode))
        await paused

    async def continue_generation(self) -> None:
        """SGLang's ``continue_generation``: opens the pause gate and restarts the scheduler."""
        with call_context.own_call():
            continued = self.tm.continue_generation(self.names.ContinueGenerationReqInput())
        await continued

    def pause_gate_closed(self) -> bool:
        """Whether new requests are held at the TokenizerManager's pause gate."""
        return bool(self.tm.is_pause)

    async def close_pause_gate(self) -> None:
        """Hold new requests at the TokenizerManager's pause gate, leaving the scheduler running."""
        async with self.tm.is_pause_cond:
            self.tm.is_pause = True

    def aborted_before_dispatch(self, obj: Any) -> dict:
        """The answer SGLang gives for a request aborted in its waiting queue, for one the plugin
        ended before it reached the scheduler: no tokens, ``finish_reason`` abort."""
        meta_info: dict[str, Any] = {
            "id": obj.rid,
            "finish_reason": {"type": "abort", "message": "Aborted before it reached the scheduler"},
            "weight_version": self.weight_version(),
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cached_tokens": 0,
            "weight_versions": [],
        }
        if self.names.wants_logprobs(obj):
            meta_info.update(input_token_logprobs=[], output_token_logprobs=[], output_token_logprobs_length=0)
        return {"text": "", "output_ids": [], "meta_info": meta_info}
