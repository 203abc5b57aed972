"""Put the pieces together for one engine: settings, plugins, hooks, and the contract's router."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

import pluggy
from fastapi import APIRouter

from engine_plugins.host.about import MountFacts
from engine_plugins.host.config import Settings, load_settings
from engine_plugins.core.control import RolloutControl
from engine_plugins.host.dispatch import Hooks
from engine_plugins.host.http_api import EngineAnswers, build_router
from engine_plugins.host.plugins import make_plugin_manager


@dataclass
class PluginStack:
    """What an engine adapter mounts: the settings it runs with, the hooks, and the routes."""

    settings: Settings
    pm: pluggy.PluginManager
    router: APIRouter
    hooks: Hooks
    about: MountFacts
    """What the adapter mounted in this process; it fills it in, ``GET /v1/engine_plugins`` answers it."""


def assemble(
    get_control: Callable[[], Optional[RolloutControl]],
    engine_api_keys: Callable[[], Iterable[str]] = lambda: (),
    settings: Optional[Settings] = None,
    engine_answers: Optional[Mapping[str, EngineAnswers]] = None,
) -> PluginStack:
    """Build the stack for an engine whose control *get_control* returns once it is up.

    Reads the environment unless *settings* is given, so a bad ``ENGINE_PLUGINS_*`` value or a
    broken third-party plugin stops the engine here, at startup. The control's own aborts (pause,
    version bumps) go through the ``abort`` hook from the first contract call on.
    *engine_answers*: how the engine's own routes of the contract's paths answer (see
    :func:`~engine_plugins.host.http_api.build_router`).
    """
    settings = settings or load_settings()
    pm = make_plugin_manager(settings)
    hooks = Hooks(pm, get_control, trace_calls=settings.trace)
    about = MountFacts()
    router = build_router(hooks, settings, engine_api_keys, engine_answers=engine_answers, about=about)
    return PluginStack(settings=settings, pm=pm, router=router, hooks=hooks, about=about)
