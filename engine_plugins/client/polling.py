"""Bounded waiting: a deadline, and an exponential backoff that never sleeps past it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass


@dataclass
class Deadline:
    """A point in ``time.monotonic()`` time; every wait towards it is cut at it."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        """The deadline *seconds* from now."""
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        """Seconds left, never below 0."""
        return max(self.at - time.monotonic(), 0.0)

    def expired(self) -> bool:
        """True once the deadline has passed."""
        return self.remaining() <= 0.0


class Backoff:
    """Delays 0.05, 0.1, 0.2, ... up to *cap* seconds: quick to notice a fast drain, light on a slow one."""

    def __init__(self, first_s: float = 0.05, cap_s: float = 1.0) -> None:
        self.next_s = first_s
        self.cap_s = cap_s

    async def sleep(self, deadline: Deadline) -> None:
        """Sleep the next delay, or until the deadline if that comes first."""
        await asyncio.sleep(min(self.next_s, deadline.remaining()))
        self.next_s = min(self.next_s * 2, self.cap_s)
