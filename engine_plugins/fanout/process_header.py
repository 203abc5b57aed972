"""Which API server process answered: a response header on servers with several of them.

Clients reach any of a server's API processes through the one port, so a client (or a test)
that wants to see where a call landed reads ``engine-plugins-api-server: INDEX/COUNT`` on the
answer. Servers with one API process send no such header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HEADER = b"engine-plugins-api-server"


@dataclass
class ApiServerIdentity:
    """This process's place among the server's API processes; known once the engine is up."""

    index: int = 0
    count: int = 1


class ApiServerHeader:
    """ASGI middleware that names the answering API process on every HTTP answer."""

    def __init__(self, app: Any, identity: ApiServerIdentity) -> None:
        self.app = app
        self.identity = identity

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.identity.count <= 1:
            await self.app(scope, receive, send)
            return
        value = f"{self.identity.index}/{self.identity.count}".encode()

        async def named(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (HEADER, value)]}
            await send(message)

        await self.app(scope, receive, named)
