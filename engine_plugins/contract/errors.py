"""The two kinds of failure the plugins report on purpose."""

from __future__ import annotations

from typing import Any, Optional


class ContractError(Exception):
    """A request the contract refuses: sent to the client as ``status`` with ``message``."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request", param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        """Where the problem is, as FastAPI locates it (``body.new_version``, ``query.mode``), or None."""


class StartupError(RuntimeError):
    """The plugin cannot start on this engine; the message names what to fix."""


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to *limit* characters, so that an error message never echoes a
    client's million-character value back (nor carries it into a log line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
