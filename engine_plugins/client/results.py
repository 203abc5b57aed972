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


@dataclass(frozen=True)
class StaleSelector:
    """Which requests an abort by age covers: those admitted under a version older than
    ``admitted_before``, or ``max_staleness`` or more version bumps ago (exactly one is set)."""

    admitted_before: Optional[str] = None
    max_staleness: Optional[int] = None

    def __post_init__(self) -> None:
        if (self.admitted_before is None) == (self.max_staleness is None):
            raise ValueError("give exactly one of admitted_before and max_staleness")
        if self.admitted_before is not None and (not isinstance(self.admitted_before, str) or not self.admitted_before):
            raise ValueError(f"admitted_before must be a version name, not {self.admitted_before!r}")
        if self.max_staleness is not None and (
            isinstance(self.max_staleness, bool) or not isinstance(self.max_staleness, int) or self.max_staleness < 1
        ):
            raise ValueError(f"max_staleness must be a whole number of bumps >= 1, not {self.max_staleness!r}")

    def body(self) -> dict[str, Any]:
        """The selector's fields of ``POST /abort_requests``."""
        if self.admitted_before is not None:
            return {"admitted_before": self.admitted_before}
        return {"max_staleness": self.max_staleness}

    def describe(self) -> str:
        """In words, for tables and messages."""
        if self.admitted_before is not None:
            return f"admitted before {self.admitted_before}"
        return f"admitted {self.max_staleness} or more bumps ago"


def stale_unsupported(selector: StaleSelector, engine: str, route: str) -> str:
    """Why a server without the plugin cannot abort by age; nothing was sent to it."""
    return (
        f"aborting the requests {selector.describe()} needs the engine-plugins plugin on {engine}: "
        f"{engine}'s own {route} aborts by id or everything and does not know which version a request "
        "was admitted under; nothing was aborted"
    )


Progress = Callable[[str, str, Optional[int]], None]
"""``progress(url, phase, in_flight)`` while waiting for idle; phase is ``aborting``, ``waiting``,
``idle``, ``timeout`` or ``failed``. It must not block."""


def no_progress(url: str, phase: str, in_flight: Optional[int]) -> None:
    """The default progress callback: nothing."""
