"""Every ``AsyncLLM`` built in this process, handed to the plugin as it is built.

The general plugin (:func:`.plugin.general_plugin`) runs in every vLLM process, from
``EngineArgs.__post_init__`` among other places, before an engine built from those arguments
exists. It calls :func:`hook_construction`, which wraps ``AsyncLLM.__init__`` at class level
(``AsyncLLMEngine`` is the same class), so that an engine a framework builds in-process is
attached as the OpenAI server's is. vLLM's ``async_llm`` module is not imported for this: where
it is not imported yet, the class is hooked when it is (a process that never builds an engine
client, the engine core's and the workers', never pays for the import).
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
import threading
from typing import Any, Callable, Optional, Sequence

# Where vLLM defines AsyncLLM (v1/engine/async_llm.py); engine/async_llm_engine.py aliases it.
ASYNC_LLM_MODULE = "vllm.v1.engine.async_llm"
_HOOKED = "_engine_plugins_construction_hook"

_lock = threading.Lock()
_finder: Optional["_HookOnImport"] = None


def hook_construction(on_construct: Callable[[Any], None]) -> None:
    """Call *on_construct(llm)* at the end of every ``AsyncLLM.__init__`` from now on, once per
    engine (a subclass's ``__init__`` calling vLLM's counts once). Idempotent."""
    global _finder
    with _lock:
        module = sys.modules.get(ASYNC_LLM_MODULE)
        if module is not None:
            _hook_class(module, on_construct)
        elif _finder is None:
            _finder = _HookOnImport(on_construct)
            sys.meta_path.insert(0, _finder)


def hooked(cls: type) -> bool:
    """Whether *cls*'s ``__init__`` is hooked (tests)."""
    return bool(getattr(cls.__init__, _HOOKED, False))


def _hook_class(module: Any, on_construct: Callable[[Any], None]) -> None:
    cls = getattr(module, "AsyncLLM", None)
    if cls is None or hooked(cls):
        return
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        on_construct(self)

    setattr(__init__, _HOOKED, True)
    cls.__init__ = __init__


class _HookOnImport(importlib.abc.MetaPathFinder):
    """Hooks ``AsyncLLM`` right after vLLM's module defining it is executed, then leaves
    ``sys.meta_path``. The module is found and loaded by the finders after it, unchanged."""

    def __init__(self, on_construct: Callable[[Any], None]) -> None:
        self.on_construct = on_construct

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        """The spec the other finders give vLLM's module, its loader hooking the class once run."""
        global _finder
        if fullname != ASYNC_LLM_MODULE:
            return None
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _finder = None
        spec = _find_elsewhere(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, on_construct = spec.loader, self.on_construct
        exec_module = loader.exec_module

        def exec_and_hook(module: Any) -> None:
            exec_module(module)
            _hook_class(module, on_construct)

        # On the loader instance (one per module): the module keeps vLLM's own loader as __loader__.
        loader.exec_module = exec_and_hook  # type: ignore[method-assign]
        return spec


def _find_elsewhere(fullname: str, path: Optional[Sequence[str]], target: Any) -> Any:
    """The spec the other finders of ``sys.meta_path`` give *fullname* (an editable install's
    finder included), as the import would have found it without this one."""
    for finder in list(sys.meta_path):
        find_spec = getattr(finder, "find_spec", None)
        if isinstance(finder, _HookOnImport) or find_spec is None:
            continue
        spec = find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None
