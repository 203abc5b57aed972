"""vLLM's two entry points for this package, both named ``engine_plugins``.

- ``vllm.endpoint_plugins`` -> :func:`endpoint_plugin`: mounts the contract's routes on vLLM's
  OpenAI server and builds the control on the ``AsyncLLM`` (vLLM's endpoint-plugin protocol:
  ``attach_router`` while the app is built, ``init_state`` once the engine client exists).
- ``vllm.general_plugins`` -> :func:`general_plugin`: runs in every vLLM process and gives the
  engine core a utility method with its scheduler's exact running/waiting counts.

``VLLM_PLUGINS`` is an allowlist for every vLLM plugin group at once: it must name
``engine_plugins`` (endpoint plugins load only when named) and every other plugin to keep.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from argparse import Namespace
from typing import Any, Callable, Optional

from fastapi import APIRouter

from engine_plugins.host.assembly import PluginStack, assemble
from engine_plugins.host.config import Settings, describe
from engine_plugins.core.control import RolloutControl
from engine_plugins.core.delivery import install_outermost
from engine_plugins.contract.errors import StartupError
from engine_plugins.contract.schema import ProcessPart
from engine_plugins.host.about import listing, process_origin
from engine_plugins.host.exposure import key_policy
from engine_plugins.host.http_api import build_routes
from engine_plugins.fanout.peers import Peers, hand_out, handed
from engine_plugins.fanout.process_header import ApiServerHeader, ApiServerIdentity
from engine_plugins.fanout.spread import ServerControl
from engine_plugins.engines.vllm import engine_core, facade, inprocess, native_routes
from engine_plugins.engines.vllm.facade import VllmNames
from engine_plugins.engines.vllm.manifest import MANIFEST
from engine_plugins.engines.vllm.routes import MountReport, mount
from engine_plugins.engines.vllm.weight_routes import GuardWeightRoutes

# Under "vllm." so that vLLM's own log handler (configured for the "vllm" logger) prints it.
logger = logging.getLogger("vllm." + __name__)

NAME = "engine_plugins"


class VllmEndpointPlugin:
    """The contract on vLLM's API server: ``attach_router`` in ``build_app``, ``init_state`` after."""

    name = NAME
    # Only servers that generate: the render-only server and pooling models have nothing to control.
    required_tasks = ("generate",)

    def __init__(self, load_names: Callable[[], VllmNames] = facade.load_names, settings: Optional[Settings] = None) -> None:
        self._load_names = load_names
        self._settings = settings
        self._stack: Optional[PluginStack] = None
        self._control: Optional[RolloutControl] = None
        self._keys: list[str] = []
        self._api_server = ApiServerIdentity()
        self._report = MountReport()

    def attach_router(self, app: Any) -> None:
        """Mount the contract's routes; vLLM then replaces its routes with the same path and method.

        Reads ``ENGINE_PLUGINS_*`` here, not in the factory, because vLLM logs and skips a
        factory that raises, while an error here stops the server.
        """
        self._stack = assemble(lambda: self._control, lambda: self._keys, self._settings, native_routes.ENGINE_ANSWERS)
        present = {(m, getattr(r, "path", "")) for r in app.routes for m in (getattr(r, "methods", None) or ())}
        aliases = [r for r in native_routes.ALIAS_ROUTES if (r.method, r.path) not in present]
        router = self._stack.router
        if aliases:
            router = APIRouter()
            alias_router = build_routes(self._stack.hooks, self._stack.settings, aliases, lambda: self._keys,
                                        engine_answers=native_routes.ENGINE_ANSWERS)
            router.routes.extend([*self._stack.router.routes, *alias_router.routes])
        report = self._report = mount(app, router, self._stack.settings.replace_native_routes)
        about = self._stack.about
        about.engine, about.supported, about.app = "vllm", MANIFEST.supported, f"the app {_app_builder()} built"
        about.routes = [f"{m} {p}" for m, p in report.added + report.replaced]
        about.replaced = [f"{m} {p}" for m, p in report.replaced]
        about.kept_native = [f"{m} {p}" for m, p in report.kept_native]
        app.add_middleware(ApiServerHeader, identity=self._api_server)
        # The weight and memory routes vLLM's own key middleware leaves open: the contract's key rule.
        app.add_middleware(GuardWeightRoutes, keys=lambda: self._keys or [self._stack.settings.api_key or ""])
        # An abort with wait answers after the answers of the requests it covered are written.
        install_outermost(app)
        # What was mounted is said in one line once init_state has checked the engine (_log_mounted).

    async def init_state(self, engine_client: Any, state: Any, args: Namespace) -> None:
        """Check the engine and the flags, then build the control over this ``AsyncLLM``
        (with several API server processes, one over all of them)."""
        self._keys = facade.engine_api_keys(args)
        assert self._stack is not None, "vLLM calls attach_router before init_state"
        said = key_policy(getattr(args, "host", None), [self._stack.settings.api_key, *self._keys],
                          self._stack.settings.require_key)
        if said is not None:
            logger.log(*said)
        if engine_client is None:
            self._log_mounted(None, "no engine on this server (render only); the contract answers 503")
            return
        names = self._load_names()
        # One control per engine client: an engine client already attached (built in a process
        # where the general plugin hooked vLLM's construction, or given to
        # engine_plugins.inprocess.attach by a framework that holds it) keeps its tracker, and
        # its control becomes the one these routes serve; else it is attached now.
        attachment = inprocess.attachment_for(engine_client, names, self._stack.settings)
        attachment.use_stack(self._stack)
        vllm = attachment.vllm
        try:
            await vllm.request_counts()
        except Exception as exc:
            raise StartupError(
                f"engine_plugins: vLLM {names.version}: the engine core has no '{engine_core.REQUEST_COUNTS_UTILITY}' "
                "utility, so the vllm.general_plugins entry point 'engine_plugins' did not run in the engine "
                f"process; check that VLLM_PLUGINS names engine_plugins ({type(exc).__name__}: {exc})"
            ) from exc
        await attachment.ready()
        control = attachment.local_control(self._keys)
        api_servers = vllm.api_server_count(args)
        if api_servers > 1:
            # Each API process has its own front end: calls that cover the whole server are
            # passed to the other processes (the processes of one server share its parent).
            index = vllm.api_server_index()
            parent = os.getppid()
            link = handed(parent)
            if link is None:
                # vLLM loads the general plugins in the process that starts the API processes
                # before it starts them, however it was launched (docs/engine-notes.md): no link
                # means that process ran without engine_plugins allowed, so no secret is shared.
                raise StartupError(
                    f"engine_plugins: API server {index} of {api_servers} found no link to the other API processes: "
                    f"the process that started them (pid {parent}) did not load vLLM's general plugin 'engine_plugins' "
                    "before it did; set VLLM_PLUGINS naming engine_plugins in that process's environment, "
                    "not only in the API processes'"
                )
            peers = Peers(link, index, api_servers)
            control = ServerControl(control, peers)
            await control.serve_peers()
            self._api_server.index, self._api_server.count = index, api_servers
        attachment.serve(control)
        self._control = control
        about = self._stack.about
        about.engine_version, about.shims, about.ready = names.version, names.shims(), True
        about.api_servers, about.api_server_index = api_servers, (self._api_server.index if api_servers > 1 else None)
        about.others = [ProcessPart(role="engine core", installed=list(engine_core.INSTALLED), seen=True)]
        self._log_mounted(names.version)

    def _log_mounted(self, version: Optional[str], note: str = "") -> None:
        """Say in one line what this API process mounted, where, and what it checked in the engine
        core (WARNING when a contract route was left unmounted or there is no engine)."""
        assert self._stack is not None
        about, report = self._stack.about, self._report
        server = f"API server {about.api_server_index} of {about.api_servers}, " if about.api_servers > 1 else ""
        about.role = f"vLLM API server process, {server}{process_origin()}"
        kept = (f"; kept vLLM's own {listing(about.kept_native)} (ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES=0): "
                "the contract is not served there" if report.kept_native else "")
        engine = (f"engine core: {'; '.join(engine_core.INSTALLED)} ({engine_core.REQUEST_COUNTS_UTILITY} answered "
                  "the plugin's call)" if version else note)
        shims = about.shims
        logger.log(
            logging.WARNING if (kept or not version) else logging.INFO,
            "engine_plugins: serving the RL control contract on vLLM %s: routes mounted on %s in pid %d (%s); "
            "added routes: %s; replaced vLLM's routes: %s%s; %s; settings %s; shims: %s",
            version or MANIFEST.installed_version(), about.app, os.getpid(), about.role,
            listing([f"{m} {p}" for m, p in report.added]), listing(about.replaced), kept, engine,
            describe(self._stack.settings), "; ".join(shims) if shims else "none",
        )


def _app_builder() -> str:
    """The function that built the app ``attach_router`` is given (vLLM's ``build_app``), by
    module, from the calling frames; else the first caller outside this package."""
    frame, first = sys._getframe(2), ""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if frame.f_code.co_name == "build_app":
            return f"{module}.build_app()"
        if not first and not module.startswith("engine_plugins"):
            first = f"{module}.{frame.f_code.co_name}()"
        frame = frame.f_back
    return first or "vLLM"


def endpoint_plugin() -> VllmEndpointPlugin:
    """The ``vllm.endpoint_plugins`` factory: a plugin object for one API server process."""
    return VllmEndpointPlugin()


def general_plugin() -> None:
    """The ``vllm.general_plugins`` entry: give ``EngineCore`` the exact-counts utility, and
    attach the contract to every ``AsyncLLM`` this process builds.

    vLLM runs general plugins in every process (API server, engine core, workers), possibly more
    than once; installing is idempotent. The utilities matter only in the engine-core process,
    where ``GET /v1/loads`` asks each scheduler for its running and waiting counts. It also hands
    out the link between the API processes (:func:`~engine_plugins.fanout.peers.hand_out`), which
    only the API processes that this process starts read. In every other process it hooks vLLM's
    construction of ``AsyncLLM`` (:func:`.inprocess.install_construction_hook`): an engine a
    framework holds in-process gets the contract as the OpenAI server's does.
    """
    # In the process that starts the API processes (`vllm serve`'s, or a framework's that calls
    # vLLM's run_multi_api_server) this runs before it starts them: vLLM loads general plugins
    # when it builds its argument parser and its engine arguments. They inherit the link.
    hand_out()
    if not _in_engine_core():
        # vLLM loads general plugins from EngineArgs.__post_init__, before the engine those
        # arguments build exists (docs/engine-notes.md).
        inprocess.install_construction_hook()
    try:
        engine_core.install_in_engine_core()
    except ImportError as exc:
        # The endpoint plugin's startup probe turns this into a clear error in the API server.
        logger.warning("engine_plugins: cannot install its engine-core utilities: %s", exc)
        return
    _log_engine_core()


_engine_core_logged = False


def _in_engine_core() -> bool:
    """Whether this is vLLM's engine-core process (``EngineCore`` or ``EngineCore_DP<n>``), where
    no engine client is built."""
    return multiprocessing.current_process().name.startswith("EngineCore")


def _log_engine_core() -> None:
    """In vLLM's engine-core process (vLLM names it ``EngineCore`` or ``EngineCore_DP<n>``), say in
    one line what the general plugin installed there; the other processes use none of it."""
    global _engine_core_logged
    name = multiprocessing.current_process().name
    if _engine_core_logged or not _in_engine_core():
        return
    _engine_core_logged = True
    logger.info("engine_plugins: vLLM %s engine core pid %d (%s, %s): %s", MANIFEST.installed_version(), os.getpid(),
                name, process_origin(), "; ".join(engine_core.INSTALLED))
