"""The plugin manager: the engine's own answers plus the allowed third-party plugins.

Third-party plugins are entry points in the group ``engine_plugins``, narrowed by the allowlist
``ENGINE_PLUGINS_PLUGINS``. They are registered after the engine's answers
(:mod:`engine_plugins.host.default_hooks`, all ``trylast``), so every plugin is asked before the engine.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

import pluggy

from engine_plugins.host import default_hooks, trace
from engine_plugins.contract import hookspecs
from engine_plugins.host.config import Settings
from engine_plugins.contract.errors import StartupError

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "engine_plugins"


def make_plugin_manager(settings: Settings) -> pluggy.PluginManager:
    """Build a plugin manager with the engine's answers and the allowed third-party plugins.

    Raises :class:`StartupError` naming the plugin when an entry point fails to load, when a
    hookimpl matches no hookspec (a misspelled hook would otherwise never be called), or when a
    hookimpl is a wrapper (the dispatcher awaits one implementation at a time; a plugin decorates
    by calling the control instead). With ``settings.trace`` every hook call is logged.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(default_hooks, name=default_hooks.NAME)
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
    _refuse_wrappers(pm)
    if settings.trace:
        trace.install(pm)
    return pm


def _refuse_wrappers(pm: pluggy.PluginManager) -> None:
    for plugin in pm.get_plugins():
        for caller in pm.get_hookcallers(plugin) or ():
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and (impl.hookwrapper or impl.wrapper):
                    raise StartupError(
                        f"engine_plugins: plugin {impl.plugin_name!r}: hook {caller.name!r} is a wrapper, which "
                        "the engine does not call; to decorate an operation, call the control from a plain hookimpl"
                    )
