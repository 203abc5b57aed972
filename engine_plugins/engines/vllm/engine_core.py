"""What the general plugin gives vLLM's ``EngineCore``, in the engine-core process.

vLLM loads general plugins in every process, the engine core's included (``plugin.general_plugin``):
there the plugin installs the utilities the API server's facade (:class:`~.facade.VllmEngine`)
calls by name, and guards the engine core's ``wake_up`` and ``checkpoint_prepare`` against the
contract's pause. The names used here are in :data:`~.manifest.MANIFEST`, checked at startup.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

# Under "vllm." so that vLLM's own log handler (configured for the "vllm" logger) prints it.
logger = logging.getLogger("vllm." + __name__)

# The EngineCore utility method the general plugin installs; the engine core looks utility
# methods up by name.
REQUEST_COUNTS_UTILITY = "engine_plugins_request_counts"
# The EngineCore utility that marks the scheduler's pause as the contract's (install_pause_hold).
PAUSE_HOLD_UTILITY = "engine_plugins_hold_pause"
# The EngineCore utilities that keep the weight version where vLLM keeps none (before 0.27:
# install_weight_version).
SET_VERSION_UTILITY, GET_VERSION_UTILITY = "engine_plugins_set_weight_version", "engine_plugins_get_weight_version"
# vLLM 0.34's CheckpointState.RUNNING (a StrEnum): the only state a contract pause may begin in.
CHECKPOINT_RUNNING = "running"


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


def install_pause_hold(engine_core_cls: type) -> None:
    """Give ``EngineCore`` the :data:`PAUSE_HOLD_UTILITY` utility, and make its ``wake_up``
    leave a pause so held in place.

    vLLM's ``wake_up`` resumes the scheduler once all its memory is resident again (and with the
    ``scheduling`` tag alone), whoever paused it: a colocated trainer's pause, sleep, wake-up,
    weight load would resume generation before its load, behind the contract's back. While the
    contract holds its pause, ``wake_up`` brings the memory back and the scheduler stays paused
    until the contract's resume.

    Idempotent, as :func:`install_request_counts`.
    """
    if getattr(engine_core_cls, PAUSE_HOLD_UTILITY, None) is not None:
        return
    original_wake_up = engine_core_cls.wake_up

    def engine_plugins_hold_pause(self: Any, held: bool) -> Optional[str]:
        """Mark this scheduler's pause as the contract's (or no longer); or, with nothing
        changed, why not: a vLLM checkpoint prepared or under way (0.34 on)."""
        state = getattr(self, "_checkpoint_state", None)
        if held and state is not None and str(state) != CHECKPOINT_RUNNING:
            return (f"vLLM's process checkpoint is {state}: the contract cannot pause it until "
                    "POST /checkpoint/restore")
        self._engine_plugins_pause_held = bool(held)
        return None

    def wake_up(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_engine_plugins_pause_held", False):
            return original_wake_up(self, *args, **kwargs)
        # For this call only: the instance attribute hides the class's method (a DP engine's too).
        self.resume_scheduler = _stay_paused
        try:
            return original_wake_up(self, *args, **kwargs)
        finally:
            del self.resume_scheduler

    wake_up.__doc__ = original_wake_up.__doc__
    setattr(engine_core_cls, PAUSE_HOLD_UTILITY, engine_plugins_hold_pause)
    engine_core_cls.wake_up = wake_up


def install_checkpoint_guard(engine_core_cls: type) -> None:
    """Make vLLM's ``checkpoint_prepare`` (0.34 on; nothing before) refuse, with nothing changed,
    while the contract holds its pause: its drain would turn a keep pause into a wait, release
    the KV cache under the frozen requests, and leave the contract's resume refused until
    ``/checkpoint/restore``. ``/checkpoint/prepare`` answers that refusal as its 400.

    Idempotent, as :func:`install_request_counts`.
    """
    original = getattr(engine_core_cls, "checkpoint_prepare", None)
    if original is None or getattr(original, "_engine_plugins_guard", False):
        return

    def checkpoint_prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_engine_plugins_pause_held", False):
            return "Cannot prepare while the contract's pause holds the engine: POST /resume first"
        return original(self, *args, **kwargs)

    checkpoint_prepare.__doc__ = original.__doc__
    checkpoint_prepare._engine_plugins_guard = True  # type: ignore[attr-defined]
    engine_core_cls.checkpoint_prepare = checkpoint_prepare


def install_weight_version(engine_core_cls: type) -> None:
    """Give ``EngineCore`` the :data:`SET_VERSION_UTILITY` and :data:`GET_VERSION_UTILITY`
    utilities: the weight version, kept in the engine core as vLLM 0.27 on keeps its own
    (``EngineCore._weight_version``, ``"default"`` at start).

    In the engine core, not in an API process, because every API process of a server (with
    ``--api-server-count`` or data parallelism) reaches the same engine cores: a process that
    starts later, or asks after another process's bump, reads the one version. The facade uses
    them only where ``AsyncLLM`` has no ``update_weight_version`` (vLLM before 0.27).

    Idempotent, as :func:`install_request_counts`.
    """
    if getattr(engine_core_cls, SET_VERSION_UTILITY, None) is not None:
        return

    def engine_plugins_set_weight_version(self: Any, version: str) -> None:
        """Set the weight version this engine core's new tokens are generated with."""
        self._engine_plugins_weight_version = str(version)

    def engine_plugins_get_weight_version(self: Any) -> str:
        """The weight version last set (``"default"`` before any)."""
        return getattr(self, "_engine_plugins_weight_version", "default")

    setattr(engine_core_cls, SET_VERSION_UTILITY, engine_plugins_set_weight_version)
    setattr(engine_core_cls, GET_VERSION_UTILITY, engine_plugins_get_weight_version)


def _stay_paused() -> None:
    logger.info("engine_plugins: wake_up left the scheduler paused: the contract's pause holds it until /resume")


INSTALLED = (
    f"EngineCore utilities {REQUEST_COUNTS_UTILITY}, {PAUSE_HOLD_UTILITY}, {SET_VERSION_UTILITY}, {GET_VERSION_UTILITY}",
    "EngineCore.wake_up and EngineCoreProc checkpoint guards against the contract's pause",
)
"""What :func:`install_in_engine_core` installs, as the startup log and ``GET /v1/engine_plugins`` say it."""


def install_in_engine_core() -> None:
    """The general plugin's utilities on vLLM's own ``EngineCore``: :func:`install_request_counts`,
    :func:`install_pause_hold`, :func:`install_weight_version` and :func:`install_checkpoint_guard`
    (:data:`INSTALLED` says them)."""
    from vllm.v1.engine.core import EngineCore, EngineCoreProc

    install_request_counts(EngineCore)
    install_pause_hold(EngineCore)
    install_weight_version(EngineCore)
    install_checkpoint_guard(EngineCoreProc)
