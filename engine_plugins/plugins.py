"""The plugin manager: the engine's own implementation plus allowed third-party plugins.

Third-party plugins are entry points in the group ``engine_plugins``, narrowed by the allowlist
``ENGINE_PLUGINS_PLUGINS``. They are registered after the engine's implementation, so pluggy
calls them first and a plugin can answer an operation in the engine's place.
"""

from __future__ import annotations

import inspect
import logging
from importlib.metadata import entry_points
from typing import Any, Iterable

import pluggy

from . import hookspecs
from .config import Settings
from .errors import StartupError

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "engine_plugins"


def make_plugin_manager(settings: Settings, engine_plugins: Iterable[Any] = ()) -> pluggy.PluginManager:
    """Build a plugin manager with *engine_plugins* and the allowed third-party plugins.

    Raises :class:`StartupError` naming the plugin when an entry point fails to load, or when a
    hookimpl matches no hookspec (a misspelled hook would otherwise never be called).
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for plugin in engine_plugins:
        pm.register(plugin)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if settings.plugins is not None and ep.name not in settings.plugins:
            logger.info("engine_plugins: skipping plugin %s (not in ENGINE_PLUGINS_PLUGINS)", ep.name)
            continue
        try:
            pm.register(ep.load(), name=ep.name)
        except Exception as exc:
            raise StartupError(f"engine_plugins: plugin {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
        logger.info("engine_plugins: loaded plugin %s", ep.name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise StartupError(f"engine_plugins: {exc}") from exc
    return pm


async def call_hook(pm: pluggy.PluginManager, name: str, **kwargs: Any) -> Any:
    """Call hook *name* with keyword arguments and await the answer if it is awaitable."""
    result = getattr(pm.hook, name)(**kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result
