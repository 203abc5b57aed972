"""The part of SGLang's hook registry (``plugins/hook_registry.py``) the plugin uses.

Plugins register hooks by dotted target path while ``load_plugins()`` runs; SGLang applies them
all once every plugin has loaded, each target once per process, and logs which plugin hooked
what. ``AROUND`` hooks are called as ``hook(original, *args, **kwargs)``; ``AFTER`` hooks as
``hook(result, *args, **kwargs)``, a non-None return replacing the result.
"""

from __future__ import annotations

import enum
import functools
import logging
import pkgutil
from collections import defaultdict
from typing import Callable

logger = logging.getLogger("sglang.srt.plugins.hook_registry")


class HookType(enum.Enum):
    """``HookType``: the two kinds the plugin registers."""

    AFTER = "after"
    AROUND = "around"


class HookRegistry:
    """``HookRegistry``: ``register`` during plugin loading, ``apply_hooks`` after it."""

    _hooks: dict[str, list[tuple[HookType, Callable]]] = defaultdict(list)
    _patched: set[str] = set()

    @classmethod
    def register(cls, target: str, hook: Callable, hook_type: HookType = HookType.AFTER) -> None:
        """Remember *hook* for *target* (``module.Class.method`` or ``module.function``)."""
        cls._hooks[target].append((hook_type, hook))

    @classmethod
    def apply_hooks(cls, source: str = "unknown") -> None:
        """Wrap every registered target once; a target that cannot be resolved is logged and skipped."""
        for target, hooks in sorted(cls._hooks.items()):
            if target in cls._patched:
                continue
            owner_path, attr = target.rsplit(".", 1)
            try:
                owner = pkgutil.resolve_name(owner_path)
                wrapped = getattr(owner, attr)
            except (AttributeError, ImportError, ValueError):
                logger.exception("Failed to apply hooks to %s", target)
                continue
            for hook_type, hook in hooks:
                wrapped = _wrap(wrapped, hook, hook_type)
            setattr(owner, attr, wrapped)
            cls._patched.add(target)
            logger.info("Applied %d hook(s) to %s (from: plugin=%s)", len(hooks), target, source)


def _wrap(original: Callable, hook: Callable, hook_type: HookType) -> Callable:
    if hook_type is HookType.AROUND:

        @functools.wraps(original)
        def around(*args, **kwargs):
            return hook(original, *args, **kwargs)

        return around

    @functools.wraps(original)
    def after(*args, **kwargs):
        result = original(*args, **kwargs)
        modified = hook(result, *args, **kwargs)
        return modified if modified is not None else result

    return after
