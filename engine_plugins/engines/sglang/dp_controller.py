"""SGLang's data-parallel controller sleeps while it has nothing to route, as its schedulers do.

With ``--dp-size`` > 1, SGLang starts a controller process between the TokenizerManager and the
schedulers. Its event loop polls its socket without blocking, for ever: it keeps a whole core
busy even when the server is idle, whatever ``--sleep-on-idle`` says (docs/engine-notes.md).
On a machine with as many cores as ranks, that core is a rank's, and every decode step of that
rank (an abort ends a running request only at the next one) takes about twice as long.

With ``--sleep-on-idle``, SGLang's schedulers block on their sockets (``zmq.Poller``, up to one
second) before they poll; the plugin's hook gives the controller's loop the same wait, with the
loop's own body after it, so a message is routed as soon as it arrives. Without the flag the
controller keeps SGLang's loop.

This module is the code that runs in that process, with its facade (:class:`DPControllerNames`):
the HTTP server's process checked every name it uses at startup (:data:`~.manifest.MANIFEST`).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from engine_plugins.engines.sglang.manifest import DP_CONTROLLER_MODULE, MANIFEST, RUNTIME_CONTEXT, SOCK_RECV

logger = logging.getLogger("engine_plugins.engines.sglang")

# SGLang's idle sleeper waits this long at most (scheduler_components/idle_sleeper.py): the
# controller's soft watchdog is fed at least this often.
IDLE_POLL_MS = 1000


@dataclass
class DPControllerNames:
    """What the plugin uses in SGLang's data-parallel controller process (``--dp-size`` > 1)."""

    DataParallelController: type
    HookRegistry: Any
    HookType: Any
    zmq: ModuleType
    sock_recv: Callable[..., Any]
    """SGLang's receive of one message from a ZMQ socket (``flags=zmq.NOBLOCK``: or raise ``zmq.ZMQError``)."""
    sleep_on_idle: Callable[[Any], bool]
    """Whether the server runs with ``--sleep-on-idle``, given the controller (read once the
    process has its config)."""

    def hook_event_loop(self, hook: Callable) -> None:
        """Register an AROUND *hook* on ``DataParallelController.event_loop``: ``hook(original, controller)``."""
        cls = self.DataParallelController
        self.HookRegistry.register(f"{cls.__module__}.{cls.__qualname__}.event_loop", hook, self.HookType.AROUND)

    @staticmethod
    def controller_parts(controller: Any) -> tuple[Any, Any, Callable[[Any], Any]]:
        """A controller's socket from the TokenizerManager, its soft watchdog and its dispatcher."""
        return controller.recv_from_tokenizer, controller.soft_watchdog, controller._request_dispatcher


def in_dp_controller_process() -> bool:
    """Whether this (child) process may be SGLang's data-parallel controller: the process that
    runs it was started from its module, so the module is imported before plugins load. SGLang's
    schedulers under a DP controller are started from that module too; a hook there is unused."""
    return DP_CONTROLLER_MODULE in sys.modules


def load_dp_controller_names() -> DPControllerNames:
    """The names the plugin uses in the DP controller process, imported from the installed SGLang
    (the HTTP server's process checked them all at startup)."""
    from sglang.srt.managers import data_parallel_controller as dpc
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if MANIFEST.has(RUNTIME_CONTEXT):
        from sglang.srt.runtime_context import get_device

        def sleep_on_idle(controller: Any) -> bool:
            return bool(get_device().sleep_on_idle)
    else:
        # Before 0.5.17: the controller's own server args.
        def sleep_on_idle(controller: Any) -> bool:
            return bool(getattr(controller.server_args, "sleep_on_idle", False))

    return DPControllerNames(
        DataParallelController=dpc.DataParallelController,
        HookRegistry=HookRegistry,
        HookType=HookType,
        zmq=dpc.zmq,
        sock_recv=dpc.sock_recv if MANIFEST.has(SOCK_RECV) else recv_pyobj,
        sleep_on_idle=sleep_on_idle,
    )


def recv_pyobj(socket: Any, flags: int = 0) -> Any:
    """SGLang's receive before 0.5.15 (no ``sock_recv``): the socket's own ``recv_pyobj``, as
    the controller's loop calls it there."""
    return socket.recv_pyobj(flags)


def register_idle_sleep(names: DPControllerNames) -> list[str]:
    """Register the controller's event-loop hook with SGLang's hook registry (applied by SGLang
    once every plugin has loaded, in this process). Returns the method hooked, for the startup log."""

    def event_loop(original: Any, controller: Any) -> Any:
        if not names.sleep_on_idle(controller):
            return original(controller)
        logger.info("engine_plugins: SGLang's data-parallel controller waits on its socket when idle (--sleep-on-idle)")
        return run_sleeping_loop(names, controller)

    names.hook_event_loop(event_loop)
    return ["DataParallelController.event_loop"]


def run_sleeping_loop(names: DPControllerNames, controller: Any) -> None:
    """SGLang's controller loop (receive without blocking until the socket is empty, routing each
    message), after a wait until a message is there; it never returns, as SGLang's does not."""
    socket, watchdog, dispatch = names.controller_parts(controller)
    zmq = names.zmq
    poller = zmq.Poller()
    poller.register(socket, zmq.POLLIN)
    while True:
        poller.poll(IDLE_POLL_MS)
        while True:
            watchdog.feed()
            try:
                message = names.sock_recv(socket, flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                break
            dispatch(message)
