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
"""

from __future__ import annotations

import logging
from typing import Any

from engine_plugins.engines.sglang.engine_names import DPControllerNames

logger = logging.getLogger("engine_plugins.engines.sglang")

# SGLang's idle sleeper waits this long at most (scheduler_components/idle_sleeper.py): the
# controller's soft watchdog is fed at least this often.
IDLE_POLL_MS = 1000


def register_idle_sleep(names: DPControllerNames) -> None:
    """Register the controller's event-loop hook with SGLang's hook registry (applied by SGLang
    once every plugin has loaded, in this process)."""

    def event_loop(original: Any, controller: Any) -> Any:
        if not names.sleep_on_idle():
            return original(controller)
        logger.info("engine_plugins: SGLang's data-parallel controller waits on its socket when idle (--sleep-on-idle)")
        return run_sleeping_loop(names, controller)

    names.hook_event_loop(event_loop)


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
