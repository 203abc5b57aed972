"""The engine's own implementation of the hooks: each hook answered by a :class:`RolloutControl`.

SGLang, vLLM and the stub register one of these, built around their own seam, like any
third-party plugin (and before them, so that a third-party plugin can answer first).
"""

from __future__ import annotations

from typing import Callable, Optional

from .control import RolloutControl
from .errors import ContractError
from .hookspecs import hookimpl


class EnginePlugin:
    """Hook implementations delegating to the engine's :class:`RolloutControl`.

    *get_control* returns None until the engine is up (SGLang, for one, builds its tokenizer
    manager after plugins load); every hook then answers 503.
    """

    def __init__(self, get_control: Callable[[], Optional[RolloutControl]]) -> None:
        self._get_control = get_control

    def _control(self) -> RolloutControl:
        control = self._get_control()
        if control is None or not control.seam.ready():
            raise ContractError(503, "the engine is not ready yet", "unavailable")
        return control

    @hookimpl(trylast=True)
    def abort(self, request_ids, wait, timeout_s):
        """Abort through the engine's control (see the hookspec)."""
        return self._control().abort(request_ids, wait, timeout_s)

    @hookimpl(trylast=True)
    def loads(self):
        """Loads through the engine's control (see the hookspec)."""
        return self._control().loads()

    @hookimpl(trylast=True)
    def update_weight_version(self, new_version, abort_all_requests):
        """Version bump through the engine's control (see the hookspec)."""
        return self._control().update_weight_version(new_version, abort_all_requests)

    @hookimpl(trylast=True)
    def partial_generate(self, input_ids, sampling_params, request_id):
        """Partial generation through the engine's control (see the hookspec)."""
        return self._control().partial_generate(input_ids, sampling_params, request_id)

    @hookimpl(trylast=True)
    def pause(self, mode, timeout_s):
        """Pause through the engine's control (see the hookspec)."""
        return self._control().pause(mode, timeout_s)

    @hookimpl(trylast=True)
    def resume(self):
        """Resume through the engine's control (see the hookspec)."""
        return self._control().resume()

    @hookimpl(trylast=True)
    def is_paused(self):
        """Pause state from the engine's control (see the hookspec)."""
        return self._control().is_paused()
