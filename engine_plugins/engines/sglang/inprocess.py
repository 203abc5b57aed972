"""The contract on SGLang held in-process: ``engine_plugins.inprocess.attach(engine)``.

ROLL holds ``sglang.Engine`` in a Ray worker; verl hosts SGLang's TokenizerManager and app in a
Ray actor. SGLang's ``Engine.__init__`` (and ``_launch_subprocesses``) call ``load_plugins()``
first, so the plugin is installed there as in a server (:func:`.plugin.install`): its hooks are
applied to the TokenizerManager class before one is built, and the drop-in hooks
(:mod:`.native_calls`) already answer the framework's own calls of the TokenizerManager's
methods. :func:`attach` hands out the plugin stack ``install`` built, whose control is the one
over the engine's TokenizerManager (the routes' and the Python calls' one control), so that
:class:`~engine_plugins.inprocess.EngineControl` and its ``app()`` reach the same engine.

One engine per process: the contract's calls not made inside a hook are about the server's
TokenizerManager (SGLang's global state) or else the one built last; attaching another
while one lives is refused.
"""

from __future__ import annotations

from typing import Any

from engine_plugins.contract.errors import StartupError
from engine_plugins.engines.sglang import call_context, plugin
from engine_plugins.host.about import process_origin
from engine_plugins.host.assembly import PluginStack


def attach(engine: Any) -> PluginStack:
    """The plugin stack over *engine*, an ``sglang.Engine`` or its ``TokenizerManager``: the same
    stack every time (the one the plugin installed when SGLang loaded it), its control the one
    over that TokenizerManager.

    Raises :class:`TypeError` for another object, and :class:`StartupError` when SGLang did not
    load the plugin (``SGLANG_PLUGINS`` without ``engine_plugins``), when the TokenizerManager is
    SGLang's multi-tokenizer router (``--tokenizer-worker-num > 1``), or when another engine of
    this process is the one the contract serves.
    """
    done = plugin.installed()
    if done is None:
        raise StartupError(
            "engine_plugins: SGLang did not load the plugin in this process (its hooks must be registered before "
            "SGLang applies its hook registry, in Engine.__init__): install engine-plugins in SGLang's environment "
            "and, if SGLANG_PLUGINS is set, name engine_plugins in it"
        )
    names = done.names
    tm = _tokenizer_manager(names, engine)
    done.hooks.check_applied()
    serving = names.tokenizer_manager()
    if serving is not None and serving is not tm:
        raise StartupError(
            "engine_plugins: another SGLang engine of this process is the one the contract serves "
            "(the server's, or the one built last): attach one engine per process"
        )
    call_context.note_built(tm)
    _note_in_process(names, done.stack, tm)
    return done.stack


def _note_in_process(names: Any, stack: PluginStack, tm: Any) -> None:
    """``GET /v1/engine_plugins`` of an engine no SGLang HTTP server serves (``sglang.Engine``):
    the contract is served by :meth:`~engine_plugins.inprocess.EngineControl.app`, not on
    SGLang's app (which the plugin mounted on, but nothing serves)."""
    state = names.http_server.get_global_state()
    if state is not None and getattr(state, "tokenizer_manager", None) is tm:
        return  # SGLang's app serves it too (verl's actor): as the plugin recorded at install
    stack.about.app = "engine_plugins.inprocess EngineControl.app()"
    stack.about.role = f"SGLang engine held in-process ({type(tm).__name__} without SGLang's HTTP server), {process_origin()}"
    stack.about.routes = [f"{method} {route.path}" for route in stack.router.routes for method in sorted(getattr(route, "methods", ()))]
    stack.about.replaced = []


def _tokenizer_manager(names: Any, engine: Any) -> Any:
    """*engine*'s TokenizerManager (*engine* itself when it is one)."""
    tm = engine if isinstance(engine, names.TokenizerManager) else getattr(engine, "tokenizer_manager", None)
    if isinstance(tm, names.TokenizerManager):
        return tm
    if tm is not None:
        raise StartupError(
            f"engine_plugins does not support SGLang's {type(tm).__name__} (--tokenizer-worker-num > 1): its tokenizer "
            "workers hold the requests, so an abort could not reach every one. Use --tokenizer-worker-num 1"
        )
    raise TypeError(
        f"engine_plugins.inprocess.attach takes SGLang's Engine or TokenizerManager, not "
        f"{type(engine).__module__}.{type(engine).__qualname__}"
    )
