"""The contract on a stub engine held in this process: what
:func:`engine_plugins.inprocess.attach` calls for a :class:`~.engine.StubEngine`, so that fast tests
hold a stub engine as the frameworks hold vLLM's AsyncLLM or SGLang's Engine (in a Ray actor, say).

The stack is assembled as :mod:`.server` assembles it for the served stub, over the engine
object given, with no routes of the engine's own around it.
"""

from __future__ import annotations

from typing import Optional

from engine_plugins.core.control import RolloutControl
from engine_plugins.engines.stub.engine import StubEngine
from engine_plugins.host.assembly import PluginStack, assemble
from engine_plugins.host.config import Settings


def attach(engine: StubEngine, settings: Optional[Settings] = None) -> PluginStack:
    """The plugin stack over *engine* (settings from the environment unless *settings*).

    The control is made at the first contract call, as the served stub makes it, so that it
    belongs to the event loop that runs the calls. The engine's own API key is not asked for: in
    this process there is no socket, and the caller holding the engine (or the actor's handle)
    is trusted; ``ENGINE_PLUGINS_API_KEY`` still guards the routes when they are served.
    """
    if not isinstance(engine, StubEngine):
        raise TypeError(f"the stub's adapter takes a StubEngine, not {type(engine).__qualname__}")
    state: dict[str, RolloutControl] = {}

    def get_control() -> RolloutControl:
        if "control" not in state:
            state["control"] = RolloutControl(engine, stack.settings.abort_timeout_s)
        return state["control"]

    stack = assemble(get_control, lambda: (), settings)
    about = stack.about
    about.app = f"{__name__}.attach()"
    about.role = "a stub engine held in-process"
    about.routes = [f"{m} {r.path}" for r in stack.router.routes for m in sorted(getattr(r, "methods", None) or ())]
    about.ready = True
    return stack
