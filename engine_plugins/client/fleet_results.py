"""What a fleet operation returns, whichever fleet ran it: one :class:`ServerResult` per server
(or per gateway worker) inside a :class:`FleetResult`, and a weight swap's two of them.

Both fleets (:mod:`.server_fleet`, :mod:`.gateway_fleet`) build their results here, so a
timed-out answer, a failure and a weight swap read the same through either.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, Sequence

NOT_BEGUN = "its weight swap did not begin, so there is nothing to commit"
"""Why a server's commit was not sent: its begin failed."""


@dataclass
class ServerResult:
    """One server's answer to one fleet operation."""

    url: str
    ok: bool
    value: Any = None
    """The operation's outcome (Load, AbortOutcome, ...) when ok."""
    error: Optional[str] = None
    kind: Optional[str] = None
    """How it failed: ``timeout``, ``unreachable``, ``disconnected``, ``unauthorized``, ``not_found``,
    ``http``, ``protocol``, ``unsupported`` or ``internal``."""
    api: Optional[str] = None
    """What the server was detected to be, in words."""
    seconds: float = 0.0

    def set_value(self, value: Any) -> None:
        """The server answered with *value*: ok, unless the value says it ran out of time (a wait
        for release that ended first), which is then a ``timeout`` with the value's note."""
        self.value = value
        self.ok = not getattr(value, "timed_out", False)
        if not self.ok:
            self.kind, self.error = "timeout", getattr(value, "note", "") or "timed out"

    def set_failure(self, kind: str, message: str) -> None:
        """The server failed, *kind* saying how (see :attr:`kind`) and *message* in words."""
        self.ok, self.kind, self.error = False, kind, message

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        value = self.value
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        elif hasattr(value, "model_dump"):  # an answer of the contract's models
            value = value.model_dump()
        return {"url": self.url, "ok": self.ok, "api": self.api, "seconds": round(self.seconds, 4),
                "result": value, "error": self.error, "kind": self.kind}


@dataclass
class FleetResult:
    """The results of one operation over the fleet, in the order the URLs were given (sorted by
    URL behind a gateway)."""

    operation: str
    results: list[ServerResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every server succeeded."""
        return all(r.ok for r in self.results)

    @property
    def failed(self) -> list[ServerResult]:
        """The servers that did not succeed (timeouts included)."""
        return [r for r in self.results if not r.ok]

    @property
    def timed_out(self) -> list[ServerResult]:
        """The servers that ran out of time."""
        return [r for r in self.results if r.kind == "timeout"]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return {"operation": self.operation, "ok": self.ok, "seconds": round(self.seconds, 4),
                "servers": [r.to_dict() for r in self.results]}


@dataclass
class WeightSwapRun:
    """A fleet's weight swap (``fleet.weight_swap(...)``): each server's begin, then its commit."""

    began: FleetResult
    committed: Optional[FleetResult] = None


@contextlib.asynccontextmanager
async def weight_swap_run(
    begin: Callable[[], Awaitable[FleetResult]], commit: Callable[[Sequence[str]], Awaitable[FleetResult]]
) -> AsyncIterator[WeightSwapRun]:
    """A fleet's ``weight_swap`` context: *begin()*, the caller's block, then on a normal exit
    *commit(urls)* with the URLs of the servers that began. On an exception nothing is committed:
    the swaps stay open and their leases report them expired."""
    run = WeightSwapRun(await begin())
    yield run
    run.committed = await commit([r.url for r in run.began.results if r.ok])
