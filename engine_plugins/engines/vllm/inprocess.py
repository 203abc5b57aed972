"""The contract on a vLLM ``AsyncLLM`` held in-process: :func:`attach`.

One :class:`Attachment` per engine client, kept on it: the tracker (installed at once, so the
registry sees every request from then on), the drop-in wrappers of vLLM's own control methods
(:mod:`.drop_in`), the control (built at its first use) and the plugin stack whose hooks every
way in calls. Whoever comes first makes it (``engine_plugins.inprocess.attach``, the automatic
attach as vLLM builds the engine, :func:`attach_on_construction`, or the endpoint plugin's
``init_state``); the others find it, so an engine client is never wrapped twice and has one
control.

:func:`attach` is called from sync code (a Ray actor's ``__init__``), possibly with no running
event loop: what needs the engine core (its weight version, the check that the general plugin
reached it) runs before the first operation made through vLLM's methods, or as a task at once
when a loop is running.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from engine_plugins.contract.errors import StartupError
from engine_plugins.contract.schema import ProcessPart
from engine_plugins.core.control import RolloutControl
from engine_plugins.engines.vllm import construction, drop_in, engine_core, facade
from engine_plugins.engines.vllm.facade import VllmEngine, VllmNames
from engine_plugins.engines.vllm.manifest import MANIFEST
from engine_plugins.engines.vllm.seam import VllmSeam
from engine_plugins.engines.vllm.tracking import Tracker
from engine_plugins.host.about import process_origin
from engine_plugins.host.assembly import PluginStack, assemble
from engine_plugins.host.config import Settings, load_settings

# Under "vllm." so that vLLM's own log handler (configured for the "vllm" logger) prints it.
logger = logging.getLogger("vllm." + __name__)

_ATTACHMENT = "_engine_plugins_vllm_attachment"

# A pause in vLLM's wait mode returns once the running requests have finished, however long they
# run; the contract's drain gives up after ENGINE_PLUGINS_ABORT_TIMEOUT_S. vLLM's method keeps
# vLLM's behaviour: no limit a generation could reach (a year).
_WAIT_WITHOUT_LIMIT_S = 365 * 24 * 3600.0


class Attachment:
    """The contract on one ``AsyncLLM``: its tracker, its control and its plugin stack."""

    def __init__(self, llm: Any, names: VllmNames, settings: Settings) -> None:
        self.llm = llm
        self.settings = settings
        self.vllm = VllmEngine(names, llm)
        self.tracker = Tracker(self.vllm, "default", settings.scope_prefix_cache, self._bump)
        self._stack: Optional[PluginStack] = None
        self._local: Optional[RolloutControl] = None
        self._control: Any = None
        self._ready: Optional[asyncio.Future] = None
        self._checked = False

    def install(self) -> None:
        """Wrap the engine client's entry points (tracker) and control methods (drop-in)."""
        self.tracker.install()
        self._restore = drop_in.install(self.llm, self)

    # --- the control and the stack ---------------------------------------------------------------

    def local_control(self, api_keys: Any = ()) -> RolloutControl:
        """This engine client's :class:`RolloutControl`, built on first use."""
        if self._local is None:
            self._local = RolloutControl(VllmSeam(self.tracker, list(api_keys)), self.settings.abort_timeout_s)
        return self._local

    def control(self) -> Any:
        """The control every hook gets: the endpoint plugin's (over several API processes, its
        ServerControl) once it serves this engine client, else the local one."""
        return self._control if self._control is not None else self.local_control(facade.engine_api_keys(None))

    def use_stack(self, stack: PluginStack) -> None:
        """The endpoint plugin's *stack*, for the drop-in calls, unless :func:`attach` has handed
        one out already (it stays the one attach returns; both reach :meth:`control`)."""
        if self._stack is None:
            self._stack = stack

    def serve(self, control: Any) -> None:
        """The endpoint plugin serves this engine client with *control*, built over
        :meth:`local_control` (over several API processes, a ServerControl)."""
        self._control = control

    def stack(self) -> PluginStack:
        """The plugin stack the drop-in calls go through (built on first use)."""
        if self._stack is None:
            stack = assemble(self.control, lambda: facade.engine_api_keys(None), self.settings)
            about = stack.about
            about.engine, about.supported, about.engine_version = "vllm", MANIFEST.supported, self.vllm.names.version
            about.app = "the in-process app of engine_plugins.inprocess.attach()"
            about.role = f"the process holding vLLM's AsyncLLM ({process_origin()})"
            about.routes = [f"{m} {getattr(r, 'path', '')}" for r in stack.router.routes for m in sorted(getattr(r, "methods", ()) or ())]
            about.hooks = ["AsyncLLM.generate, engine_core.add_request_async, update_weight_version and collective_rpc "
                           "tracked; pause_generation, resume_generation and abort through the contract"]
            about.shims, about.ready = self.vllm.names.shims(), True
            about.others = [ProcessPart(role="engine core", installed=list(engine_core.INSTALLED), seen=self._checked)]
            self._stack = stack
        return self._stack

    # --- what needs the engine core --------------------------------------------------------------

    async def ready(self) -> None:
        """Check once that the general plugin reached the engine core, and learn its weight
        version; a :class:`StartupError` naming ``VLLM_PLUGINS`` if it did not."""
        if self._checked:
            return
        if self._ready is None or (self._ready.done() and (self._ready.cancelled() or self._ready.exception() is not None)):
            self._ready = asyncio.ensure_future(self._check())
        await asyncio.shield(self._ready)

    def start_check(self) -> None:
        """Start :meth:`ready` now when an event loop runs in this thread (else the first
        operation does it)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._ready = asyncio.ensure_future(self._check())
        self._ready.add_done_callback(_log_failure)

    async def _check(self) -> None:
        try:
            await self.vllm.request_counts()
        except Exception as exc:
            raise StartupError(
                f"engine_plugins: vLLM {self.vllm.names.version}: the engine core has no "
                f"'{engine_core.REQUEST_COUNTS_UTILITY}' utility, so the vllm.general_plugins entry point "
                "'engine_plugins' did not run in the engine process; check that VLLM_PLUGINS names engine_plugins "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        before = self.tracker.weight_version
        version = await self.vllm.get_weight_version()
        if self.tracker.weight_version == before:
            # Not when a version was set meanwhile (through the contract, or vLLM's method): the
            # one read may predate it.
            self.tracker.weight_version = version
        self._checked = True
        if self._stack is not None:
            for part in self._stack.about.others:
                part.seen = True

    # --- the contract's operations, as the drop-in wrappers call them ----------------------------

    def bypassed(self) -> bool:
        """The engine core has died: vLLM's own methods answer (with vLLM's error)."""
        return self.vllm.errored()

    def knows(self, request_id: str) -> bool:
        """Whether a request with this external id is tracked (in flight through ``generate``)."""
        return self.tracker.registry.has_request_id(request_id)

    async def pause(self, mode: str, clear_cache: bool) -> None:
        """The ``pause`` hook in vLLM's *mode* (``wait``: as long as the requests run)."""
        await self.ready()
        timeout_s = _WAIT_WITHOUT_LIMIT_S if mode == "wait" else self.settings.abort_timeout_s
        await self.stack().hooks.call("pause", None, mode=mode, timeout_s=timeout_s, clear_cache=clear_cache)

    async def resume(self) -> None:
        """The ``resume`` hook."""
        await self.ready()
        await self.stack().hooks.call("resume", None)

    async def abort(self, request_ids: list[str]) -> None:
        """The ``abort`` hook for exactly *request_ids*, without waiting, as vLLM's ``abort``."""
        await self.ready()
        await self.stack().hooks.call("abort", None, request_ids=request_ids, wait=False,
                                      timeout_s=self.settings.abort_timeout_s, reason="request")

    async def _bump(self, version: str) -> None:
        # A version set through vLLM's own method (a framework's update_weight_version, vLLM's
        # /finish_weight_update): the contract's bump, seen by the plugins (on every API process).
        await self.ready()
        await self.stack().hooks.call("update_weight_version", None, new_version=version, abort_all_requests=False)


def _log_failure(task: asyncio.Future) -> None:
    """The early check's failure, said at once (the first operation raises it again)."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("%s", task.exception())


def attachment_of(llm: Any) -> Optional[Attachment]:
    """The engine client's attachment, if it has one."""
    found = getattr(llm, _ATTACHMENT, None)
    return found if isinstance(found, Attachment) else None


def attachment_for(llm: Any, names: Optional[VllmNames] = None, settings: Optional[Settings] = None) -> Attachment:
    """The engine client's attachment, made now (tracker and drop-in wrappers installed) if it
    has none. *names*: vLLM's (default: imported from the installed vLLM); *settings*: default
    read from the environment (a bad ``ENGINE_PLUGINS_*`` value raises, naming it)."""
    found = attachment_of(llm)
    if found is not None:
        return found
    attachment = Attachment(llm, names or facade.load_names(), settings or load_settings())
    attachment.install()
    setattr(llm, _ATTACHMENT, attachment)
    attachment.start_check()
    return attachment


def attach(llm: Any) -> PluginStack:
    """The plugin stack over *llm* (vLLM's ``AsyncLLM``): the same one each time for the same
    engine client, over the same control as the endpoint plugin's where it serves this engine
    client. Sync; what needs the engine core runs later (see the module's docstring)."""
    return attachment_for(llm).stack()


def attach_on_construction(llm: Any) -> None:
    """What vLLM's construction of an ``AsyncLLM`` calls (:func:`install_construction_hook`):
    attach it, unless ``ENGINE_PLUGINS_ATTACH_IN_PROCESS`` is off."""
    settings = load_settings()
    if settings.attach_in_process:
        attachment_for(llm, settings=settings)


def install_construction_hook() -> None:
    """Attach every ``AsyncLLM`` built in this process from now on (the general plugin's call)."""
    construction.hook_construction(attach_on_construction)
