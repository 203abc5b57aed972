"""The ``sglang.srt.plugins`` entry point ``engine_plugins``: the contract on SGLang's own server.

SGLang's ``load_plugins()`` calls :func:`load` in the HTTP server's process before the app
serves (``launch_server.py:79``), and again in its scheduler, detokenizer and DP-controller
processes, where it does nothing. There it wraps the TokenizerManager (:mod:`.tracking`) and
mounts the contract's routes on ``http_server.app`` (:mod:`.routes`); the control is built per
TokenizerManager, once SGLang has made one.

SGLang logs and ignores an ``Exception`` from a plugin (``plugins/__init__.py:131-136``), so a
misconfiguration is raised as ``SystemExit``: the server stops at startup with the message.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
from dataclasses import dataclass
from typing import Any, Optional

from ..assembly import PluginStack, assemble
from ..config import ConfigError, describe
from ..control import RolloutControl
from ..errors import StartupError
from .adapter import SGLangSeam
from .engine_api import SGLangApi, load_sglang_api
from .routes import MountReport, mount
from .tracking import patch_tokenizer_manager, tracker_for

logger = logging.getLogger("engine_plugins.sglang")

_CONTROL_ATTR = "_engine_plugins_control"


@dataclass
class Installed:
    """What :func:`install` set up in this process."""

    api: SGLangApi
    stack: PluginStack
    report: MountReport


_installed: Optional[Installed] = None


def load() -> None:
    """Entry point called by SGLang's ``load_plugins()``; harmless in child processes and twice."""
    if multiprocessing.parent_process() is not None:
        return  # SGLang's scheduler, detokenizer, DP controller: no HTTP app to serve
    if _installed is not None:
        return
    try:
        install(load_sglang_api())
    except (StartupError, ConfigError) as exc:
        logger.error("%s", exc)
        raise SystemExit(f"engine_plugins: {exc}") from exc


def install(api: SGLangApi) -> Installed:
    """Wrap *api*'s TokenizerManager class and mount the contract on its app (once per process)."""
    global _installed
    if _installed is not None:
        return _installed

    def control_for(tm: Any) -> RolloutControl:
        control = tm.__dict__.get(_CONTROL_ATTR)
        if control is None:
            control = RolloutControl(SGLangSeam(api, tracker_for(tm, api.health_check_prefix)), stack.settings.abort_timeout_s)
            setattr(tm, _CONTROL_ATTR, control)
        return control

    def get_control() -> Optional[RolloutControl]:
        tm = api.tokenizer_manager()
        return None if tm is None else control_for(tm)

    stack = assemble(get_control, api.api_keys)
    patch_tokenizer_manager(api.TokenizerManager, api.health_check_prefix)
    _refuse_multi_tokenizer(api)
    report = mount(api.app, stack.router, stack.settings.replace_native_routes, api.admin_optional)
    _installed = Installed(api=api, stack=stack, report=report)
    _log_startup(api, stack, report)
    return _installed


def _refuse_multi_tokenizer(api: SGLangApi) -> None:
    """Stop ``launch_server`` when ``--tokenizer-worker-num > 1``, before it starts anything.

    Tokenizer workers re-import the app (``SGLANG_HTTP_SERVER_APP_PATH``) and never load
    plugins, so the contract's routes would silently be missing there; and each worker would
    see only its own requests, so an abort-all could not be a fence.
    """
    original = api.http_server.launch_server
    if getattr(original, "_engine_plugins_checked", False):
        return

    @functools.wraps(original)
    def launch_server(server_args: Any, *args: Any, **kwargs: Any) -> Any:
        workers = getattr(server_args, "tokenizer_worker_num", 1) or 1
        if workers > 1:
            raise StartupError(
                f"engine_plugins does not support --tokenizer-worker-num {workers}: SGLang's tokenizer "
                "workers do not load plugins, so the contract's routes would be missing and an abort "
                "could not reach every request. Use --tokenizer-worker-num 1, or disable the plugin "
                "with SGLANG_PLUGINS set to the other plugins' names."
            )
        return original(server_args, *args, **kwargs)

    launch_server._engine_plugins_checked = True
    api.http_server.launch_server = launch_server


def _log_startup(api: SGLangApi, stack: PluginStack, report: MountReport) -> None:
    """Log what was mounted. SGLang configures logging only later (``configure_logger``), so
    until then the lines go through a handler of their own, at INFO."""
    lines = [f"engine_plugins: SGLang {api.version}: contract mounted; settings {describe(stack.settings)}", *report.lines()]
    if logger.isEnabledFor(logging.INFO) and logging.getLogger().handlers:
        for line in lines:
            logger.info("%s", line)
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        for line in lines:
            logger.info("%s", line)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate

