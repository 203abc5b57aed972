"""The vLLM facade: every vLLM object the plugin touches, reached through these classes.

- :class:`VllmNames`: what the plugin imports from vLLM (prompt and sampling types, the errors
  that mean a bad request), with the shims between releases that the probe switched on.
  :func:`load_names` imports them from the installed vLLM after the startup check of
  :data:`~.manifest.MANIFEST`, and :func:`check_names` checks the objects it holds against the
  same manifest (a fake's too).
- :class:`VllmEngine`: one ``AsyncLLM`` (the engine client of one API server process). Every
  attribute the plugin reads, replaces or calls on vLLM's objects goes through it; its
  constructor checks them on the engine client, when vLLM hands it to the plugin at startup.
- The launch flags the plugin reads.

The names themselves and the supported releases are in :mod:`.manifest`; what runs in vLLM's
engine-core process is in :mod:`.engine_core`. A check failure is a
:class:`~engine_plugins.contract.errors.StartupError` naming what is missing and the vLLM version. Tests
build :class:`VllmNames` from a fake vLLM without vLLM installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from contextvars import ContextVar
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Optional, Sequence

from engine_plugins.engines.engine_manifest import missing_attributes
from engine_plugins.engines.probe import ProbeReport
from engine_plugins.contract.errors import ContractError
from engine_plugins.core.model_limits import ModelLimits
from engine_plugins.contract.schema import SamplingParams as ContractSampling
from engine_plugins.contract.schema import WeightVersionSpan
from engine_plugins.core.seam import Generation
from engine_plugins.engines.vllm.engine_core import (
    GET_VERSION_UTILITY,
    PAUSE_HOLD_UTILITY,
    REQUEST_COUNTS_UTILITY,
    SET_VERSION_UTILITY,
)
from engine_plugins.engines.vllm.manifest import (
    CLIENT_ERROR,
    ENGINE_CLIENT_ATTRIBUTES,
    ENGINE_CLIENT_VERSION_ATTRIBUTES,
    ENGINE_WEIGHT_VERSION,
    INPUTS_MODULE,
    MANIFEST,
    NATIVE_SPANS,
    PROCESS_CHECKPOINT,
    REJECTS_WHILE_PAUSED,
    SAMPLING_PARAMS_MODULE,
    UTILITY_ALL,
)

# Set while the contract sets the version through the engine client: any other caller of its
# update_weight_version is one of vLLM's own routes (/finish_weight_update's weight_version).
_CONTRACT_SETS_VERSION: ContextVar[bool] = ContextVar("engine_plugins_vllm_contract_sets_version", default=False)

# Set while the plugin itself calls the engine client's pause_generation or resume_generation (the
# contract's pause and resume reaching vLLM): the drop-in wrappers (:mod:`.drop_in`) pass these
# calls to vLLM's methods, and turn every other caller's into the contract's operations.
_PLUGIN_CALLS: ContextVar[bool] = ContextVar("engine_plugins_vllm_plugin_calls", default=False)


def plugin_calling() -> bool:
    """Whether the engine client is being called by the plugin itself (in this task)."""
    return _PLUGIN_CALLS.get()


@contextlib.contextmanager
def as_plugin() -> Iterator[None]:
    """Within this block, calls to the engine client's wrapped methods are the plugin's own."""
    token = _PLUGIN_CALLS.set(True)
    try:
        yield
    finally:
        _PLUGIN_CALLS.reset(token)

# Under "vllm." so that vLLM's own log handler (configured for the "vllm" logger) prints it.
logger = logging.getLogger("vllm." + __name__)

# vLLM's finish reasons in the contract's terms; any other ("error") raises.
_FINISH = {"stop": "stop", "length": "length", "abort": "abort", "repetition": "stop"}


@dataclass(frozen=True)
class VllmNames:
    """The vLLM names the plugin uses, imported once (or supplied by a fake for tests)."""

    version: str
    TokensPrompt: Callable[..., Any]
    SamplingParams: Callable[..., Any]
    final_only: Any
    """``RequestOutputKind.FINAL_ONLY``: one cumulative output at the end."""
    client_errors: tuple[type[BaseException], ...]
    """Errors that mean the request was bad (``VLLMClientError``, ``ValueError``; before 0.27,
    which has no ``VLLMClientError``, ``ValueError`` and ``VLLMNotFoundError``)."""
    engine_weight_version: bool = True
    """``AsyncLLM.update_weight_version`` and ``get_weight_version`` exist (0.27 on); else the
    plugin's engine-core utilities keep the version (:func:`~.engine_core.install_weight_version`)."""
    client_error: bool = True
    """``VLLMClientError`` exists (0.27 on): only for the startup log's list of shims."""
    native_spans: bool = True
    """``CompletionOutput.weight_versions`` exists (0.32 on); else the plugin counts spans."""
    utility_all: bool = True
    """``call_utility_all_async`` exists (0.32 on); else one utility call per engine core."""
    paused_errors: tuple[type[BaseException], ...] = ()
    """What ``generate`` raises for a request the engine core rejects while paused (0.33 on:
    ``RetryableRequestError``); empty where new requests queue during every pause."""
    status_errors: tuple[type[BaseException], ...] = ()
    """Refusals that carry their own HTTP status (``GracefulHTTPError``: a full queue, 503; on
    0.34 ``EngineFaultedError`` while the engine is unhealthy, 503), answered with that status."""
    process_checkpoint: bool = False
    """vLLM's process checkpoint (0.34 on: ``/checkpoint/prepare``), guarded against the
    contract's pause by :func:`~.engine_core.install_checkpoint_guard` and :meth:`VllmEngine.hold_pause`."""

    def shims(self) -> list[str]:
        """The shims in force for this vLLM, in words (for the startup log)."""
        report = ProbeReport(features={ENGINE_WEIGHT_VERSION: self.engine_weight_version, CLIENT_ERROR: self.client_error,
                                       NATIVE_SPANS: self.native_spans, UTILITY_ALL: self.utility_all,
                                       REJECTS_WHILE_PAUSED: bool(self.paused_errors),
                                       PROCESS_CHECKPOINT: self.process_checkpoint})
        return MANIFEST.shims(report)

    def engine_objects(self) -> dict[str, Any]:
        """The vLLM objects held here, by the module vLLM defines them in, as the manifest's
        check reads them."""
        return {
            INPUTS_MODULE: SimpleNamespace(TokensPrompt=self.TokensPrompt),
            SAMPLING_PARAMS_MODULE: SimpleNamespace(SamplingParams=self.SamplingParams),
        }


def load_names() -> VllmNames:
    """Import what the plugin needs from the installed vLLM and check it; a clear StartupError if it cannot."""
    MANIFEST.refuse_outside_range()
    version = MANIFEST.installed_version()
    try:
        import vllm
        from vllm import exceptions as vllm_exceptions
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind, SamplingParams
    except ImportError as exc:
        raise MANIFEST.import_error(MANIFEST.installed_version(), exc) from exc
    version = getattr(vllm, "__version__", version)
    report = MANIFEST.probe()
    if report.missing:
        raise MANIFEST.missing_error(version, report.missing)
    rejects = report.features[REJECTS_WHILE_PAUSED]
    if report.features[CLIENT_ERROR]:
        client_errors: tuple[type[BaseException], ...] = (vllm_exceptions.VLLMClientError, ValueError)
    else:
        # Before 0.27 the request's errors are ValueErrors (VLLMValidationError and
        # VLLMUnprocessableEntityError subclass it), and VLLMNotFoundError (an unknown LoRA).
        client_errors = (ValueError, vllm_exceptions.VLLMNotFoundError)
    names = VllmNames(
        version=version,
        TokensPrompt=TokensPrompt,
        SamplingParams=SamplingParams,
        final_only=RequestOutputKind.FINAL_ONLY,
        client_errors=client_errors,
        engine_weight_version=report.features[ENGINE_WEIGHT_VERSION],
        client_error=report.features[CLIENT_ERROR],
        native_spans=report.features[NATIVE_SPANS],
        utility_all=report.features[UTILITY_ALL],
        paused_errors=(vllm_exceptions.RetryableRequestError,) if rejects else (),
        status_errors=tuple(e for e in (getattr(vllm_exceptions, "GracefulHTTPError", None),) if e is not None),
        process_checkpoint=report.features[PROCESS_CHECKPOINT],
    )
    check_names(names)
    return names


def check_names(names: VllmNames) -> None:
    """Raise StartupError naming the vLLM version if it lies outside the supported range or an
    object *names* holds lacks a name of :data:`~.manifest.MANIFEST` (a SamplingParams field)."""
    MANIFEST.check_objects(names.version, names.engine_objects())


class VllmEngine:
    """One vLLM engine client (``AsyncLLM``), through the names the plugin uses.

    Constructed when vLLM hands the engine client to the plugin (``init_state``), it checks every
    attribute the plugin uses on it.
    """

    def __init__(self, names: VllmNames, llm: Any) -> None:
        wanted = ENGINE_CLIENT_ATTRIBUTES + (ENGINE_CLIENT_VERSION_ATTRIBUTES if names.engine_weight_version else ())
        missing = missing_attributes(llm, wanted)
        if missing:
            raise MANIFEST.missing_on_instance(f"the engine client ({type(llm).__name__})", names.version, missing)
        self.names = names
        self.llm = llm
        # The spans shim (vLLM without CompletionOutput.weight_versions): per external request
        # id, the (version, first token) starts, and the tokens seen so far.
        self._span_starts: dict[str, list[tuple[str, int]]] = {}
        self._span_tokens: dict[str, int] = {}
        self._version = "default"
        self.pause_held = False
        """Whether this engine client's contract pause is on (set before vLLM's pause, cleared
        after vLLM's resume): a request the engine core rejects as paused while it is off was
        rejected by someone else's pause (0.34's ``/checkpoint/prepare``)."""

    def errored(self) -> bool:
        """Whether the engine core has died."""
        return bool(self.llm.errored)

    def api_server_index(self) -> int:
        """Which of the server's API processes this engine client belongs to (0 with one)."""
        return int(getattr(self.llm.engine_core, "client_index", 0))

    def api_server_count(self, args: Any) -> int:
        """How many API processes share this engine: the engine client's own count where it has
        one, as vLLM started it, else ``--api-server-count``. They differ when a launcher that
        runs one API process (``python -m vllm.entrypoints.openai.api_server``, a framework's
        ``run_server``) is given ``--api-server-count N``: vLLM serves from that one process."""
        count = getattr(self.llm.engine_core, "client_count", None)
        return int(count) if isinstance(count, int) and count >= 1 else api_server_count(args)

    # --- requests ---------------------------------------------------------------------------

    def model_limits(self) -> ModelLimits:
        """The model's vocabulary (its embedding's rows) and the context length vLLM serves."""
        config = self.llm.model_config
        return ModelLimits(int(config.get_vocab_size()), int(config.max_model_len))

    def sampling_params(self, params: ContractSampling) -> Any:
        """The contract's sampling params as vLLM ``SamplingParams``, with the sampled token's
        logprob and one cumulative output at the end."""
        return self.names.SamplingParams(
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=0 if params.top_k == -1 else params.top_k,  # vLLM: 0 disables top-k
            stop_token_ids=list(params.stop_token_ids),
            ignore_eos=params.ignore_eos,
            seed=params.seed,
            logprobs=0,  # the sampled token's logprob only
            # Token ids in, token ids out: no per-step detokenizing in the API process.
            detokenize=False,
            output_kind=self.names.final_only,
        )

    async def render_tokens(self, input_ids: list[int]) -> Any:
        """A token prompt rendered to the engine's input, as vLLM's own serving does first."""
        (engine_input,) = await self.llm.renderer.render_cmpl_async([self.names.TokensPrompt(prompt_token_ids=input_ids)])
        return engine_input

    def generate(self, engine_input: Any, sampling_params: Any, request_id: str) -> AsyncIterator[Any]:
        """``AsyncLLM.generate`` (the tracked one, once :meth:`wrap_entry_points` has run)."""
        return self.llm.generate(engine_input, sampling_params, request_id=request_id)

    def read_output(self, output: Any) -> Generation:
        """A vLLM ``RequestOutput`` as the contract's cumulative snapshot."""
        completion = output.outputs[0]
        tokens = list(completion.token_ids)
        logprobs = completion.logprobs or []
        # The sampled token is always among a position's logprobs (FlatLogprobs indexes the same way).
        values = [float(logprobs[i][token].logprob) for i, token in enumerate(tokens)]
        finish = completion.finish_reason
        if finish is not None and finish not in _FINISH:
            raise RuntimeError(f"vLLM finished the request with {finish!r}")
        if self.names.native_spans:
            spans = [WeightVersionSpan(version=s.version, start=s.start, end=s.end) for s in (completion.weight_versions or [])]
        else:
            spans = self._counted_spans(output.request_id, len(tokens)) if finish is not None else []
        return Generation(
            output_ids=tokens,
            output_logprobs=values,
            finish_reason=_FINISH.get(finish) if finish else None,
            weight_versions=spans,
            cached_tokens=output.num_cached_tokens,
        )

    def _counted_spans(self, request_id: str, n: int) -> list[WeightVersionSpan]:
        """The spans the shim counted for *request_id*, cut to the *n* tokens of its output."""
        starts = self._span_starts.get(request_id, [])
        ends = [start for _, start in starts[1:]] + [n]
        return [WeightVersionSpan(version=v, start=min(s, n), end=min(e, n)) for (v, s), e in zip(starts, ends) if min(e, n) > min(s, n)]

    def _count_tokens(self, engine_core_outputs: Any) -> None:
        """The spans shim: label each engine-core output's new tokens with the version in force.

        The version is the one last set through this engine client; a token decoded in the step
        the engine core switched versions may carry the other label (the engine core stamps no
        version on its outputs before vLLM 0.32).
        """
        states = self.llm.output_processor.request_states
        for out in engine_core_outputs or ():
            state = states.get(out.request_id)
            if state is None or not out.new_token_ids:
                continue
            key = getattr(state, "external_req_id", None) or out.request_id
            starts = self._span_starts.setdefault(key, [])
            count = self._span_tokens.get(key, 0)
            if not starts or starts[-1][0] != self._version:
                starts.append((self._version, count))
            self._span_tokens[key] = count + len(out.new_token_ids)

    def forget_request(self, request_id: str) -> None:
        """Drop what the spans shim counted for *request_id* (its generator has ended)."""
        self._span_starts.pop(request_id, None)
        self._span_tokens.pop(request_id, None)

    @staticmethod
    def cache_salt(request: Any) -> Any:
        """The prefix-cache salt an ``EngineCoreRequest`` carries (the caller's, or None)."""
        return request.cache_salt

    @staticmethod
    def set_cache_salt(request: Any, salt: str) -> None:
        """Give an ``EngineCoreRequest`` not yet sent to the engine core its prefix-cache salt."""
        request.cache_salt = salt

    @staticmethod
    def internal_request_id(request: Any) -> str:
        """The engine core's id of an ``EngineCoreRequest``: the external id and 8 random characters."""
        return request.request_id

    async def abort_internal(self, internal_ids: Sequence[str]) -> list[str]:
        """Abort by internal ids; the ids the front end actually aborted.

        ``AsyncLLM.abort`` makes these two calls and throws the list away. The front end puts a
        final ``finish_reason="abort"`` output with every token so far into each request's
        queue at once.
        """
        aborted = self.llm.output_processor.abort_requests(list(internal_ids), internal=True)
        await self.llm.engine_core.abort_requests_async(aborted)
        return aborted

    async def request_counts(self) -> list[tuple[int, int]]:
        """``(running, waiting)`` per engine core (data-parallel rank), read from each scheduler
        through the utility the general plugin installs (:func:`~.engine_core.install_request_counts`)."""
        answers = await self._on_every_core(REQUEST_COUNTS_UTILITY)
        return [(int(running), int(waiting)) for running, waiting in answers]

    async def hold_pause(self, held: bool) -> None:
        """Mark every engine core's pause as the contract's (*held*), or no longer: vLLM's
        ``wake_up`` then leaves it paused (:func:`~.engine_core.install_pause_hold`).

        A 409 naming the checkpoint's state, with no core held, where an engine core refuses
        because a vLLM checkpoint is prepared or under way (0.34 on): vLLM could not resume
        under the contract until ``/checkpoint/restore``.
        """
        refusals = [answer for answer in await self._on_every_core(PAUSE_HOLD_UTILITY, held) if answer]
        if refusals:
            await self._on_every_core(PAUSE_HOLD_UTILITY, False)
            raise ContractError(409, refusals[0])

    async def _on_every_core(self, utility: str, *args: Any) -> list[Any]:
        """One of the general plugin's utilities called on every engine core; their answers."""
        core = self.llm.engine_core
        if self.names.utility_all:
            return await core.call_utility_all_async(utility, *args)
        if hasattr(core, "core_engines"):
            # Before vLLM 0.32: what call_utility_all_async does, one call per engine core.
            return await asyncio.gather(*(core._call_utility_async(utility, *args, engine=engine) for engine in core.core_engines))
        return [await core.call_utility_async(utility, *args)]  # an in-process engine core (one rank)

    # --- pause and weight version ---------------------------------------------------------------

    async def pause_generation(self, mode: str, clear_cache: bool) -> None:
        """``AsyncLLM.pause_generation``: ``keep`` freezes running requests; ``abort`` aborts what
        the engine core holds; new requests queue in both. The pause is held: vLLM's
        ``/wake_up`` does not end it (:func:`~.engine_core.install_pause_hold`)."""
        await self.hold_pause(True)
        self.pause_held = True
        try:
            with as_plugin():
                await self.llm.pause_generation(mode=mode, clear_cache=clear_cache)
        except BaseException:
            await self.hold_pause(False)
            self.pause_held = False
            raise

    async def resume_generation(self) -> None:
        """``AsyncLLM.resume_generation``: queued and frozen requests go on."""
        await self.hold_pause(False)
        with as_plugin():
            await self.llm.resume_generation()
        self.pause_held = False

    async def update_weight_version(self, version: str) -> None:
        """``AsyncLLM.update_weight_version`` (the tracked one, once :meth:`wrap_entry_points`
        has run; before vLLM 0.27 the plugin's own): later tokens carry *version*; nothing is aborted."""
        token = _CONTRACT_SETS_VERSION.set(True)
        try:
            await self.llm.update_weight_version(version)
        finally:
            _CONTRACT_SETS_VERSION.reset(token)

    async def _set_version_on_cores(self, new_version: str) -> None:
        """The plugin weight version (vLLM before 0.27): *new_version* in every engine core,
        where every API process of the server reads it."""
        await self._on_every_core(SET_VERSION_UTILITY, new_version)

    def learn_weight_version(self, version: str) -> None:
        """The engine core's version, set through another engine client (API process) of it:
        the spans shim labels this client's next tokens with it."""
        self._version = version

    async def get_weight_version(self) -> str:
        """The version the engine core stamps on new tokens (before vLLM 0.27: the one the
        plugin keeps there, the same in every engine core)."""
        if self.names.engine_weight_version:
            version = await self.llm.get_weight_version()
        else:
            # Set on every engine core together: one of them answers for all.
            version = await self.llm.engine_core.call_utility_async(GET_VERSION_UTILITY)
        self._version = version
        return version

    # --- the entry points the tracker wraps ------------------------------------------------------

    def wrap_entry_points(
        self, generate: Callable, add_request_async: Callable, version_set: Callable[[str], None],
        weights_loaded: Callable[[], None] = lambda: None, bump: Optional[Callable[[str], Awaitable[Any]]] = None,
    ) -> Callable[[], None]:
        """Replace ``generate``, ``update_weight_version``, ``collective_rpc`` and
        ``engine_core.add_request_async`` on these instances; returns a function that restores
        the originals.

        Every serving route calls the engine client's ``generate``, and ``AsyncLLM`` sends each
        request to the engine core through ``engine_core.add_request_async``, so instance
        attributes see every request. *generate* and *add_request_async* receive the originals as
        their first argument. *version_set* learns every version set through the engine client,
        by any route (vLLM's own weight-update routes set it the same way). *weights_loaded*
        learns of every weight load through it (``/collective_rpc`` ``reload_weights``, the
        weight-transfer engine's ``/update_weights``), once it has returned. *bump*: what a
        version set by vLLM's own routes (``/finish_weight_update``'s ``weight_version``)
        becomes instead, the contract's bump, which sets it through this engine client itself.
        """
        llm = self.llm
        core = llm.engine_core
        original_generate, original_add = llm.generate, core.add_request_async
        # Before vLLM 0.27 the engine client has no update_weight_version: the tracked one is
        # the only one, over the plugin's engine-core utilities (no vLLM route sets a version there).
        original_update = llm.update_weight_version if self.names.engine_weight_version else self._set_version_on_cores
        original_rpc = getattr(llm, "collective_rpc", None)  # an engine's fake may have none
        processor = llm.output_processor
        original_process = processor.process_outputs

        def tracked_generate(*args: Any, **kwargs: Any) -> Any:
            return generate(original_generate, *args, **kwargs)

        async def tracked_add(request: Any) -> None:
            await add_request_async(original_add, request)

        async def tracked_update(new_version: str) -> None:
            if bump is not None and not _CONTRACT_SETS_VERSION.get():
                try:
                    await bump(new_version)  # comes back here, as the contract's own set
                    return
                except Exception as exc:  # vLLM's route still sets the version, as without the plugin
                    logger.warning("engine_plugins: the contract's bump to %r failed (%s); setting it as vLLM does",
                                   new_version, exc)
            await original_update(new_version)
            self._version = new_version
            version_set(new_version)

        async def tracked_rpc(method: str, *args: Any, **kwargs: Any) -> Any:
            result = await original_rpc(method, *args, **kwargs)
            if may_load_weights(method):
                weights_loaded()
            return result

        def counted_process(engine_core_outputs: Any, *args: Any, **kwargs: Any) -> Any:
            self._count_tokens(engine_core_outputs)
            return original_process(engine_core_outputs, *args, **kwargs)

        llm.generate = tracked_generate
        llm.update_weight_version = tracked_update
        core.add_request_async = tracked_add
        if original_rpc is not None:
            llm.collective_rpc = tracked_rpc
        if not self.names.native_spans:
            processor.process_outputs = counted_process

        def restore() -> None:
            del llm.generate
            del llm.update_weight_version
            del core.add_request_async
            if original_rpc is not None:
                del llm.collective_rpc
            if not self.names.native_spans:
                del processor.process_outputs

        return restore


# What in the name of a worker method called through collective_rpc says it may load weights:
# vLLM's own (reload_weights, update_weights of its weight-transfer routes) and the frameworks'
# worker extensions (OpenRLHF's update_weight, NeMo-RL's update_weights_from_collective and
# nccl_reshard_refit, verl's update_weights_from_ipc, ...).
WEIGHT_LOAD_WORDS = ("weight", "refit")


def may_load_weights(method: Any) -> bool:
    """Whether a ``collective_rpc`` of *method* may have loaded new weights: a function (it may do
    anything) or a method whose name says weights or a refit. Taking one for a load that was not
    costs only the prefix cache's reuse from before it; missing a load would serve stale KV."""
    return not isinstance(method, str) or any(word in method.lower() for word in WEIGHT_LOAD_WORDS)


# --- the launch flags ---------------------------------------------------------------------------


def engine_api_keys(args: Any) -> list[str]:
    """The keys vLLM's own middleware accepts: ``--api-key`` (a list) or else ``VLLM_API_KEY``."""
    keys = getattr(args, "api_key", None)
    if isinstance(keys, str):
        keys = [keys]
    if not keys:
        keys = [os.environ.get("VLLM_API_KEY") or ""]
    return [k for k in keys if k]


def api_server_count(args: Any) -> int:
    """``--api-server-count``: how many API server processes share the engine."""
    return getattr(args, "api_server_count", None) or 1
