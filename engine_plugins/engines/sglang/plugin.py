"""The ``sglang.srt.plugins`` entry point ``engine_plugins``: the contract on SGLang's own server.

SGLang's ``load_plugins()`` calls :func:`load` in the HTTP server's process before the app
serves, and again in its scheduler, detokenizer and DP-controller processes; in the DP
controller it lets the controller's loop sleep when idle (:mod:`.dp_controller`), in the
scheduler it ends an aborted running request without one more decode pass
(:mod:`.scheduler_abort`), elsewhere it does nothing. There it registers the TokenizerManager
hooks (:mod:`.tracking`) and a check of the launch flags with SGLang's hook registry, which
applies them once every plugin has loaded, and mounts the contract's routes on SGLang's app
(:mod:`.routes`); the control is built per TokenizerManager, once SGLang has made one. Hooks on
the TokenizerManager's own control methods give a caller's Python calls of them what the routes
give (:mod:`.native_calls`). ``sglang.Engine`` held in-process loads the plugin the same way in
its ``__init__``; :func:`installed` is what :mod:`.inprocess` attaches to it.

SGLang logs and ignores an ``Exception`` from a plugin, so a misconfiguration is raised as
``SystemExit``: the server stops at startup with the message.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import weakref
from dataclasses import dataclass
from typing import Any, Optional

from fastapi import APIRouter

from engine_plugins.host.assembly import PluginStack, assemble
from engine_plugins.host.config import ConfigError, describe
from engine_plugins.core.control import RolloutControl
from engine_plugins.core.delivery import install_outermost
from engine_plugins.contract.errors import StartupError
from engine_plugins.contract.schema import ProcessPart
from engine_plugins.host.about import MountFacts, listing, process_origin
from engine_plugins.host.exposure import RedactSecrets, key_policy
from engine_plugins.host.http_api import RouteContext, build_routes
from engine_plugins.engines.sglang import native_routes, routes
from engine_plugins.engines.sglang.dp_controller import (
    in_dp_controller_process,
    load_dp_controller_names,
    register_idle_sleep,
)
from engine_plugins.engines.sglang.facade import SGLangNames, load_names
from engine_plugins.engines.sglang.manifest import MANIFEST
from engine_plugins.engines.sglang.native_calls import register_native_call_hooks
from engine_plugins.engines.sglang.routes import MountReport, mount
from engine_plugins.engines.sglang.scheduler_abort import (
    in_scheduler_process,
    load_scheduler_names,
    register_abort_without_last_pass,
)
from engine_plugins.engines.sglang.seam import SGLangSeam
from engine_plugins.engines.sglang.tracking import RegisteredHooks, register_hooks, tracker_for
from engine_plugins.engines.sglang.weight_updates import WeightUpdates, register_weight_update_hooks

logger = logging.getLogger("engine_plugins.engines.sglang")

_installed = False


def load() -> None:
    """Entry point called by SGLang's ``load_plugins()``; harmless in child processes and twice."""
    if in_sglang_child_process():
        # SGLang's scheduler, detokenizer, DP controller: no HTTP app to serve.
        _load_in_child()
        return
    if _installed:
        return
    try:
        install(load_names())
    except (StartupError, ConfigError) as exc:
        logger.error("%s", exc)
        raise SystemExit(f"engine_plugins: {exc}") from exc


# Where SGLang calls load_plugins(): its own child processes run code of its managers (scheduler,
# detokenizer, DP controller); the process that builds the TokenizerManager and serves the app runs
# its entry points (Engine, launch_server), whether it is a console's main process, a spawned or
# forked child of a framework's Ray actor, or the actor itself.
_CHILD_CALLERS = "sglang.srt.managers."
_HOST_CALLERS = "sglang.srt.entrypoints."


def in_sglang_child_process() -> bool:
    """Whether this process is one of SGLang's own children, told by the code that called
    ``load_plugins()``: SGLang's managers (a child), its entry points (the process that serves).
    Called otherwise (not through ``load_plugins``), a process with a ``multiprocessing`` parent
    is taken for a child."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(_CHILD_CALLERS):
            return True
        if module.startswith(_HOST_CALLERS):
            return False
        frame = frame.f_back
    return multiprocessing.parent_process() is not None


_child_installed = False


def _load_in_child() -> None:
    """In SGLang's DP-controller process, register the hook that lets its loop sleep when idle;
    in its scheduler process, the hooks that end an aborted running request without one more
    decode pass. A failure keeps SGLang's own code (the HTTP process checked every name at startup).
    A process where something was registered says so in one line."""
    global _child_installed
    if _child_installed:
        return
    _child_installed = True
    hooked: list[str] = []
    roles: list[str] = []
    try:
        if in_dp_controller_process():
            roles.append("DP controller")
            hooked += register_idle_sleep(load_dp_controller_names())
        if in_scheduler_process():
            roles.append("scheduler")
            hooked += register_abort_without_last_pass(load_scheduler_names())
    except (ImportError, AttributeError) as exc:
        logger.warning("engine_plugins: SGLang keeps its own code in this process: %s", exc)
        return
    if hooked:
        _log_lines([
            f"engine_plugins: SGLang {_installed_version()} {' / '.join(roles)} pid {os.getpid()} ({process_origin()}): "
            f"hooks {', '.join(hooked)} registered with SGLang's HookRegistry (applied once plugins have loaded)"
        ])


def _installed_version() -> str:
    """The installed SGLang's version, from its metadata (a child does not load the facade)."""
    return MANIFEST.installed_version()


@dataclass
class Installed:
    """What :func:`install` made in this process: the one plugin stack, over every TokenizerManager."""

    names: SGLangNames
    stack: PluginStack
    hooks: RegisteredHooks


_process: Optional[Installed] = None
# One control per TokenizerManager, made on first use: the routes' and the in-process calls' alike.
_controls: "weakref.WeakKeyDictionary[Any, RolloutControl]" = weakref.WeakKeyDictionary()


def installed() -> Optional[Installed]:
    """The plugin as :func:`install` put it in this process, or None before."""
    return _process


def control_for(names: SGLangNames, stack: PluginStack, tm: Any) -> RolloutControl:
    """The contract's control over the TokenizerManager *tm* (one per TokenizerManager)."""
    control = _controls.get(tm)
    if control is None:
        seam = SGLangSeam(tracker_for(names, tm, stack.settings.scope_prefix_cache))
        control = _controls[tm] = RolloutControl(seam, stack.settings.abort_timeout_s)
    return control


def install(names: SGLangNames) -> None:
    """Register the plugin's hooks with SGLang and mount the contract on its app (once per process).

    The hooks take effect when SGLang applies its hook registry, right after loading plugins.
    """
    global _installed, _process
    if _installed:
        return

    def get_control() -> Optional[RolloutControl]:
        # The TokenizerManager the call is about: a hook's, the server's, an in-process engine's.
        tm = names.tokenizer_manager()
        return None if tm is None else control_for(names, stack, tm)

    stack = assemble(get_control, names.api_keys)
    hooks = register_hooks(names, stack.settings.scope_prefix_cache, stack.settings.exact_token_versions)
    hooks.originals.update(register_weight_update_hooks(names, _weight_updates(names, stack)))
    hooks.originals.update(register_native_call_hooks(names, RouteContext(hooks=stack.hooks, settings=stack.settings)))

    def check_launch(original: Any, server_args: Any, *args: Any, **kwargs: Any) -> Any:
        hooks.check_applied()
        host, keys = SGLangNames.serving_address(server_args)
        # SGLang logs its server args, keys included, when it starts the engine.
        logging.getLogger(SGLangNames.SERVER_ARGS_LOGGER).addFilter(RedactSecrets(keys))
        said = key_policy(host, [stack.settings.api_key, *keys], stack.settings.require_key)
        if said is not None:
            logger.log(*said)
        _refuse_multi_tokenizer(server_args)
        return original(server_args, *args, **kwargs)

    names.hook_launch_server(check_launch)
    report = mount(names.app, _with_native_routes(names, stack), stack.settings.replace_native_routes, names.mark_admin_optional)
    # SGLang releases a request before its answer is written: an abort with wait answers after it.
    install_outermost(names.app)
    _installed = True
    _process = Installed(names, stack, hooks)
    _log_startup(names, stack, report, hooks)


def _weight_updates(names: SGLangNames, stack: PluginStack) -> WeightUpdates:
    """The plugin's part in SGLang's weight updates, through the contract's hooks (so that the
    plugins see its pause, bump and resume)."""

    async def bump(version: str, request: Any) -> None:
        await stack.hooks.call("update_weight_version", request, new_version=version, abort_all_requests=False)

    async def pause(request: Any) -> None:
        await stack.hooks.call("pause", request, mode="keep", timeout_s=stack.settings.abort_timeout_s, clear_cache=False)

    async def resume(request: Any) -> None:
        await stack.hooks.call("resume", request)

    return WeightUpdates(names, bump, pause, resume, lambda: stack.hooks.control().is_paused().is_paused)


def _with_native_routes(names: SGLangNames, stack: PluginStack) -> APIRouter:
    """The contract's routes, SGLang's own control routes the plugin serves in their place, and
    the aliases of routes older SGLang versions had, where this one lacks them."""
    aliases = [r for r in native_routes.ALIAS_ROUTES if not routes.native_routes(names.app, r.method, r.path)]
    native = build_routes(stack.hooks, stack.settings, [*native_routes.REPLACED_ROUTES, *aliases], names.api_keys)
    router = APIRouter()
    router.routes.extend([*stack.router.routes, *native.routes])
    return router


def _refuse_multi_tokenizer(server_args: Any) -> None:
    """Stop SGLang's ``launch_server`` when ``--tokenizer-worker-num > 1``, before it starts anything.

    Tokenizer workers re-import the app and never load plugins, so the contract's routes would
    silently be missing there; and each worker would see only its own requests, so an abort-all
    could not be a fence.
    """
    workers = SGLangNames.tokenizer_worker_num(server_args)
    if workers > 1:
        raise StartupError(
            f"engine_plugins does not support --tokenizer-worker-num {workers}: SGLang's tokenizer "
            "workers do not load plugins, so the contract's routes would be missing and an abort "
            "could not reach every request. Use --tokenizer-worker-num 1, or disable the plugin "
            "with SGLANG_PLUGINS set to the other plugins' names."
        )


# What the plugin installs in SGLang's children by its rule (each says so in its own line): the
# HTTP process does not see them, so GET /v1/engine_plugins lists them as not seen.
_CHILD_PARTS = (
    ProcessPart(role="scheduler", installed=["Scheduler.abort_request and Scheduler._reqs_finishing_inflight hooks "
                                             "(SGLang 0.5.22 on: an aborted running request ends without one more decode pass)"], seen=False),
    ProcessPart(role="DP controller (--dp-size > 1)", installed=["DataParallelController.event_loop hook (sleeps when idle)"], seen=False),
)


def _record(about: MountFacts, names: SGLangNames, report: MountReport, hooked: list[str]) -> None:
    """Fill *about* (``GET /v1/engine_plugins``) with what :func:`install` did in this process."""
    about.engine, about.engine_version, about.supported = "sglang", names.version, MANIFEST.supported
    about.app = f"{getattr(names.http_server, '__name__', 'sglang.srt.entrypoints.http_server')}.app"
    about.role = f"SGLang's HTTP server process, {process_origin()}"
    about.routes = [f"{m} {p}" for m, p in report.added]
    about.replaced = [f"{m} {p} ({e})" for m, p, e in report.replaced]
    about.kept_native = [f"{m} {p} ({e})" for m, p, e in report.kept_native]
    about.hooks = [f"{h} hook" for h in hooked]
    about.others = [part.model_copy() for part in _CHILD_PARTS]
    about.shims = list(names.notes)
    about.ready = True


def _log_startup(names: SGLangNames, stack: PluginStack, report: MountReport, hooks: RegisteredHooks) -> None:
    """Log what was mounted and where, in one line."""
    hooked = [*hooks.targets(), "http_server.launch_server"]
    _record(stack.about, names, report, hooked)
    about = stack.about
    kept = (f"; kept SGLang routes (ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES=false), contract route not mounted: "
            f"{listing(about.kept_native)}" if about.kept_native else "")
    _log_lines([
        f"engine_plugins: SGLang {names.version}: contract mounted on {about.app} (the app launch_server serves) "
        f"in pid {os.getpid()} ({about.role}); added routes: {listing(about.routes)}; "
        f"replaced SGLang routes: {listing(about.replaced)}{kept}; "
        f"hooks registered with SGLang's HookRegistry (applied once plugins have loaded): {', '.join(hooked)}; "
        f"scheduler processes: their own line; settings {describe(stack.settings)}; "
        f"shims: {'; '.join(names.notes) or 'none'} (supported: SGLang {MANIFEST.supported})"
    ])


def _log_lines(lines: list[str]) -> None:
    """Log *lines* at INFO. SGLang configures logging only later, so until then the lines go
    through a handler of their own."""
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
