"""A client for an engine's own routes (no contract models), with a deadline-bound wait on its
``/v1/loads``, which the patches give both engines in SGLang's shape."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import httpx

# Real engines on two cores can stall a client for seconds: generous deadlines, never sleeps.
DEADLINE_S = 60.0


class Native:
    """Calls one engine server's native routes, with its API key unless told otherwise."""

    def __init__(self, server) -> None:
        self.server = server
        self.http = httpx.AsyncClient(base_url=server.url, headers=server.headers(),
                                      timeout=httpx.Timeout(300.0, connect=30.0))

    async def __aenter__(self) -> "Native":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.http.aclose()

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        """Call a route; its JSON, failing the test on any status but 200."""
        response = await self.http.request(method, path, json=body)
        assert response.status_code == 200, f"{method} {path} -> {response.status_code} {response.text}"
        return response.json()

    async def counts(self) -> tuple[int, int]:
        """(running, waiting) over every rank of ``GET /v1/loads``."""
        loads = (await self.ok("GET", "/v1/loads"))["loads"]
        return sum(r["num_running_reqs"] for r in loads), sum(r["num_waiting_reqs"] for r in loads)

    async def wait_counts(self, what: str, predicate: Callable[[int, int], bool]) -> tuple[int, int]:
        """Poll ``/v1/loads`` until *predicate(running, waiting)*; a setup failure if it never holds."""
        end = time.monotonic() + DEADLINE_S
        counts = await self.counts()
        while not predicate(*counts):
            if time.monotonic() > end:
                raise AssertionError(f"setup: {what} did not happen within {DEADLINE_S} s; last (running, waiting): {counts}")
            await asyncio.sleep(0.02)
            counts = await self.counts()
        return counts
