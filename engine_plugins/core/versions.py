"""The order of weight versions on one server: the order of its bumps.

Version names are the trainer's own tags (``"step-41"``, ``"v7"``), which need not sort, and a
name may come back (a rollback, or a tag reused after a restart of the trainer). So the order is
the server's own count of bumps, its *generation*: the version in force when the control starts
is generation 0, and each bump through ``/update_weight_version`` is the next generation, even
when it repeats a name. A name seen again refers to its latest bump.

A request's *staleness* is how many bumps have happened since it was admitted: the current
generation minus its admission generation.
"""

from __future__ import annotations

from typing import Optional


class WeightVersions:
    """The bump history of one server, oldest first; generation *g* is the *g*-th bump."""

    def __init__(self, initial: str) -> None:
        self._names: list[str] = [initial]
        self._latest: dict[str, int] = {initial: 0}

    @property
    def current(self) -> int:
        """The generation in force: how many bumps this server has had."""
        return len(self._names) - 1

    @property
    def current_name(self) -> str:
        """The name of the version in force."""
        return self._names[-1]

    def bump(self, name: str) -> int:
        """Record a bump to *name*; returns its generation."""
        self._names.append(name)
        self._latest[name] = self.current
        return self.current

    def name_of(self, generation: int) -> str:
        """The name of the version bumped to at *generation*."""
        return self._names[generation]

    def generation_of(self, name: str) -> Optional[int]:
        """The latest generation named *name*, or None when this server never had it."""
        return self._latest.get(name)

    def staleness(self, generation: int) -> int:
        """How many bumps have happened since *generation*."""
        return self.current - generation

    def recent_names(self, n: int = 8) -> list[str]:
        """The last *n* distinct names, newest first (for messages)."""
        seen: list[str] = []
        for name in reversed(self._names):
            if name not in seen:
                seen.append(name)
                if len(seen) == n:
                    break
        return seen
