"""The one exception the client raises for a server: what went wrong, in words a user can act on."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import ValidationError

FailureKind = Literal["unreachable", "timeout", "disconnected", "unauthorized", "not_found", "http", "protocol", "unsupported"]


class ServerError(Exception):
    """A call to one server failed. ``kind`` says how; ``message`` says what to do about it.

    The fleet never lets one of these escape: it becomes that server's result, so the other
    servers' results are never lost.
    """

    def __init__(self, url: str, kind: FailureKind, message: str, status: Optional[int] = None) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url
        self.kind = kind
        self.message = message
        self.status = status


def answer_problems(exc: ValidationError) -> str:
    """What in an answer does not fit the contract's model, field by field."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors())
