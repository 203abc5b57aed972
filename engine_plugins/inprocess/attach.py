"""Which engine an in-process object is, and the adapter that attaches the contract to it."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

from engine_plugins.inprocess.control import EngineControl

# The top-level package of an engine object's class: the engine, and the adapter module whose
# attach() gives the plugin stack over it (the same object for the same engine).
_ADAPTERS = {
    "vllm": ("vllm", "engine_plugins.engines.vllm.inprocess"),
    "sglang": ("sglang", "engine_plugins.engines.sglang.inprocess"),
    "engine_plugins": ("stub", "engine_plugins.engines.stub.inprocess"),
}

_ATTACHED = "_engine_plugins_control"


def attach(engine: Any) -> EngineControl:
    """The contract's control of *engine*, an engine held in this process: vLLM's ``AsyncLLM``
    (``AsyncLLMEngine``), SGLang's ``Engine`` or its ``TokenizerManager``. The same control each
    time for the same engine; the plugin's fixes to the engine's own methods are in place from the
    first call (most are already when the plugin is installed and the engine loaded it).

    Raises :class:`TypeError` for an object no adapter takes.
    """
    found = getattr(engine, _ATTACHED, None)
    if isinstance(found, EngineControl):
        return found
    package = type(engine).__module__.partition(".")[0]
    found = _ADAPTERS.get(package)
    if found is None:
        raise TypeError(
            f"engine_plugins.inprocess.attach takes vLLM's AsyncLLM or SGLang's Engine or TokenizerManager, "
            f"not {type(engine).__module__}.{type(engine).__qualname__}"
        )
    name, adapter = found
    stack = importlib.import_module(adapter).attach(engine)
    control = getattr(stack, _ATTACHED, None)
    if not isinstance(control, EngineControl):
        control = EngineControl(stack, name)
        setattr(stack, _ATTACHED, control)
    with contextlib.suppress(AttributeError):  # an engine object with __slots__ is found through its stack
        setattr(engine, _ATTACHED, control)
    return control
