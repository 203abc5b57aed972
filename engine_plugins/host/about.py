"""What the plugin mounted, and where: the facts behind the startup log's line and
``GET /v1/engine_plugins`` (:class:`~engine_plugins.contract.schema.MountInfo`).

An engine adapter fills one :class:`MountFacts` as it installs; the route reads it per request,
so what it answers is what this process did, never a guess made elsewhere.
"""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from engine_plugins.contract.schema import ABOUT_PATH, MountInfo, ProcessPart

__all__ = ["ABOUT_PATH", "MountFacts", "listing", "process_origin"]


@dataclass
class MountFacts:
    """What this process's plugin installed: filled by the engine adapter, read by the route."""

    engine: str = "stub"
    engine_version: Optional[str] = None
    supported: Optional[str] = None
    app: str = ""
    role: str = ""
    routes: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    kept_native: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    """What this process hooked or installed besides the routes."""
    others: list[ProcessPart] = field(default_factory=list)
    """What the plugin installs in the engine's other processes."""
    shims: list[str] = field(default_factory=list)
    api_server_index: Optional[int] = None
    api_servers: int = 1
    ready: bool = False

    def answer(self, settings: dict[str, Any]) -> MountInfo:
        """The route's answer, with *settings* (``describe(settings)``) and this process's pid."""
        from engine_plugins import __version__

        pid = os.getpid()
        routes = [f"contract routes on {self.app}"] if self.routes else []
        here = ProcessPart(role=self.role, pid=pid, installed=[*routes, *self.hooks], seen=True)
        return MountInfo(
            plugin_version=__version__, engine=self.engine, engine_version=self.engine_version, supported=self.supported,
            app=self.app, pid=pid, role=self.role, api_server_index=self.api_server_index, api_servers=self.api_servers,
            routes=list(self.routes), replaced=list(self.replaced), kept_native=list(self.kept_native),
            processes=[here, *self.others], shims=list(self.shims), settings=settings, ready=self.ready,
        )


def process_origin() -> str:
    """How this process came to be, for the log: the main process of its command, or a
    ``multiprocessing`` child of pid N (a framework's launcher that spawns or forks the engine)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return "main process"
    return f"multiprocessing child of pid {parent.pid}"


def listing(items: list[str]) -> str:
    """Items joined by ``, ``, or ``none``."""
    return ", ".join(items) or "none"
