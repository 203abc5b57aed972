"""What each operation returns for one server, the same whichever engine or API answered.

A field the server does not report is None (SGLang's native abort, for one, does not say how
many requests it aborted); ``note`` says why, in words.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional


@dataclass
class AbortOutcome:
    """An abort, or an abort-until-idle: how many were aborted, what is left, whether it is idle."""

    aborted: Optional[int]
    in_flight: Optional[int]
    idle: Optional[bool]
    timed_out: bool = False
    rounds: int = 1
    seconds: float = 0.0
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return asdict(self)


@dataclass
class VersionOutcome:
    """A weight-version bump: the new and (when known) previous version, and requests it aborted."""

    new_version: str
    previous_version: Optional[str]
    aborted: Optional[int]
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return asdict(self)


@dataclass
class PauseOutcome:
    """The pause state after a pause, resume or query (``mode`` None when not known or not paused)."""

    is_paused: Optional[bool]
    mode: Optional[str]
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return asdict(self)


Progress = Callable[[str, str, Optional[int]], None]
"""``progress(url, phase, in_flight)`` while waiting for idle; phase is ``aborting``, ``waiting``,
``idle``, ``timeout`` or ``failed``. It must not block."""


def no_progress(url: str, phase: str, in_flight: Optional[int]) -> None:
    """The default progress callback: nothing."""
