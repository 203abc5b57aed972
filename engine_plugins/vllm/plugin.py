"""vLLM's two entry points for this package, both named ``engine_plugins``.

- ``vllm.endpoint_plugins`` -> :func:`endpoint_plugin`: mounts the contract's routes on vLLM's
  OpenAI server and builds the control on the ``AsyncLLM`` (the protocol of
  ``vllm/plugins/endpoint_plugins/interface.py:49-94``).
- ``vllm.general_plugins`` -> :func:`general_plugin`: runs in every vLLM process and gives the
  engine core a utility method with its scheduler's exact running/waiting counts.

``VLLM_PLUGINS`` is an allowlist for every vLLM plugin group at once: it must name
``engine_plugins`` (endpoint plugins load only when named) and every other plugin to keep.
"""

from __future__ import annotations

import logging
from argparse import Namespace
from typing import Any, Callable, Optional

from ..assembly import PluginStack, assemble
from ..config import Settings, describe
from ..control import RolloutControl
from ..errors import StartupError
from ..http_api import contract_paths
from . import internals
from .internals import VllmApi
from .seam import VllmSeam

# Under "vllm." so that vLLM's own log handler (configured for the "vllm" logger) prints it.
logger = logging.getLogger("vllm." + __name__)

NAME = "engine_plugins"


class VllmEndpointPlugin:
    """The contract on vLLM's API server: ``attach_router`` in ``build_app``, ``init_state`` after."""

    name = NAME
    # Only servers that generate: the render-only server and pooling models have nothing to control.
    required_tasks = ("generate",)

    def __init__(self, load_api: Callable[[], VllmApi] = internals.load_api, settings: Optional[Settings] = None) -> None:
        self._load_api = load_api
        self._settings = settings
        self._stack: Optional[PluginStack] = None
        self._control: Optional[RolloutControl] = None
        self._keys: list[str] = []

    @property
    def control(self) -> Optional[RolloutControl]:
        """The control once :meth:`init_state` has run (None before)."""
        return self._control

    def attach_router(self, app: Any) -> None:
        """Mount the contract's routes; vLLM then replaces its routes with the same path and method.

        Reads ``ENGINE_PLUGINS_*`` here, not in the factory, because vLLM logs and skips a
        factory that raises (plugins/__init__.py:140-145) while an error here stops the server.
        """
        self._stack = assemble(lambda: self._control, lambda: self._keys, self._settings)
        settings = self._stack.settings
        native = _native_routes(app)
        router = self._stack.router
        for method, path in contract_paths(settings):
            if (method, path) not in native:
                logger.info("engine_plugins: adding %s %s", method, path)
            elif settings.replace_native_routes:
                # vLLM's own RL routes (VLLM_SERVER_DEV_MODE=1) share these paths.
                logger.info("engine_plugins: the contract's %s %s replaces vLLM's own route", method, path)
            else:
                logger.warning(
                    "engine_plugins: keeping vLLM's own %s %s (ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES=0); "
                    "the contract is not served there", method, path,
                )
                router.routes = [r for r in router.routes if not _same_route(r, method, path)]
        app.include_router(router)

    async def init_state(self, engine_client: Any, state: Any, args: Namespace) -> None:
        """Check the engine and the flags, then build the control over this ``AsyncLLM``."""
        self._keys = internals.engine_api_keys(args)
        if engine_client is None:
            logger.warning("engine_plugins: no engine on this server (render only); the contract answers 503")
            return
        api_servers = getattr(args, "api_server_count", None) or 1
        if api_servers > 1:
            # Each API process would hold its own registry and see only its own requests,
            # while pause is engine-wide: abort-all and loads could not be exact.
            raise StartupError(
                f"engine_plugins: --api-server-count {api_servers} is not supported: each API server "
                "process would see only its own requests, so abort-all and /v1/loads could not be exact. "
                "Run with --api-server-count 1 (with data parallelism, set it explicitly)."
            )
        api = self._load_api()
        internals.check_engine(engine_client, api)
        try:
            await internals.request_counts(engine_client)
        except Exception as exc:
            raise StartupError(
                f"engine_plugins: vLLM {api.version}: the engine core has no '{internals.REQUEST_COUNTS_UTILITY}' "
                "utility, so the vllm.general_plugins entry point 'engine_plugins' did not run in the engine "
                f"process; check that VLLM_PLUGINS names engine_plugins ({type(exc).__name__}: {exc})"
            ) from exc
        seam = VllmSeam(engine_client, api, self._keys, await engine_client.get_weight_version())
        seam.install()
        assert self._stack is not None, "vLLM calls attach_router before init_state"
        self._control = RolloutControl(seam, self._stack.settings.abort_timeout_s)
        state.engine_plugins_control = self._control
        logger.info(
            "engine_plugins: serving the RL control contract on vLLM %s (%s)", api.version, describe(self._stack.settings)
        )


def _native_routes(app: Any) -> set[tuple[str, str]]:
    pairs = set()
    for route in app.routes:
        for method in getattr(route, "methods", None) or ():
            pairs.add((method, getattr(route, "path", "")))
    return pairs


def _same_route(route: Any, method: str, path: str) -> bool:
    return getattr(route, "path", None) == path and method in (getattr(route, "methods", None) or ())


def endpoint_plugin() -> VllmEndpointPlugin:
    """The ``vllm.endpoint_plugins`` factory: a plugin object for one API server process."""
    return VllmEndpointPlugin()


def general_plugin() -> None:
    """The ``vllm.general_plugins`` entry: give ``EngineCore`` the exact-counts utility.

    vLLM runs general plugins in every process (API server, engine core, workers), possibly more
    than once; installing is idempotent and matters only in the engine-core process, where
    ``GET /v1/loads`` asks each scheduler for its running and waiting counts.
    """
    try:
        internals.install_request_counts_in_vllm()
    except ImportError as exc:
        # The endpoint plugin's startup probe turns this into a clear error in the API server.
        logger.warning("engine_plugins: cannot install the request-counts utility: %s", exc)
