"""A framework's Ray driver, for the launchers that start an engine inside a Ray actor
(slime's and miles' ``SGLangEngine``, NeMo-RL's SGLang worker, SkyRL's ``VLLMServerActor``).

The driver starts a Ray cluster of its own on this machine (``address="local"``: never another
test's), as the frameworks' drivers do on a node, sized for it: its cores, no dashboard, a small
object store (the engines' tokens never travel through it). Ray's workers inherit this process's
environment, so ``PYTHONPATH`` (the plugin, Ray itself) and ``VLLM_PLUGINS`` reach the actor as
a cluster's environment or a ``runtime_env`` would. The actor's output, and that of the processes
it starts, comes back through Ray's log monitor to this process's output: the server's log.

The driver holds the actor until it is told to stop (SIGTERM or SIGINT), then asks the actor to
shut its engine down as the framework would and stops Ray.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from typing import Any, Callable

# Ray's object store: its smallest size. Nothing large passes through it here.
OBJECT_STORE_BYTES = 80 * 1024 * 1024


def start_ray() -> Any:
    """A new local Ray cluster for this driver: the machine's cores, no dashboard."""
    import ray

    # A session folder of its own (Ray's default is shared by every cluster on the machine).
    temp_dir = tempfile.mkdtemp(prefix="ray-")
    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=True,
             object_store_memory=OBJECT_STORE_BYTES, _temp_dir=temp_dir, configure_logging=False)
    return ray


def hold_until_stopped(shutdown: Callable[[], None]) -> None:
    """Block until SIGTERM or SIGINT, then run *shutdown* (the framework's own engine shutdown)
    and stop Ray."""
    import ray

    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    print("ray driver: holding the engine's actor until SIGTERM", flush=True)
    stopped.wait()
    # The signal usually reached the whole process group, the actor included: its shutdown is
    # what a framework would call, and may find the actor already gone.
    try:
        shutdown()
    except Exception as exc:  # noqa: BLE001 - a dead actor is not an error at this point
        print(f"ray driver: the actor's shutdown: {type(exc).__name__}", flush=True)
    ray.shutdown()
    sys.exit(0)
