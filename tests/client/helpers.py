"""Waiting helpers for the client tests: poll a condition with a deadline, never a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

DEADLINE_S = 60.0


async def wait_until(what: str, check: Callable[[], Awaitable[bool]], deadline_s: float = DEADLINE_S) -> None:
    """Poll *check* until true; fail the setup (naming *what*) if it never is."""
    end = time.monotonic() + deadline_s
    while not await check():
        if time.monotonic() > end:
            raise AssertionError(f"setup: {what} did not happen within {deadline_s} s")
        await asyncio.sleep(0.01)


async def wait_in_flight(server, n: int, tasks=(), running: bool = True) -> None:
    """Until the contract server holds at least *n* requests (all dispatched, with *running*).

    If one of *tasks* (the generations) ends first, fail at once with what it returned.
    """

    async def check() -> bool:
        for task in tasks:
            if task.done():
                raise AssertionError(f"setup: a generation ended before {n} were in flight: "
                                     f"{task.exception() or str(task.result())[:300]}")
        load = await server.loads()
        return load.in_flight >= n and (load.running >= n or not running)

    await wait_until(f"{n} requests in flight on {server.url}", check)


def start_generations(server, n: int, max_new_tokens: int = 100_000, prefix: str = "g") -> list[asyncio.Task]:
    """*n* partial generations in the background with ids ``{prefix}-{i}``, each running to its
    length (``ignore_eos``: a random model draws its end-of-sequence token now and then)."""
    return [
        asyncio.create_task(server.partial_generate([1, 2, 3], {"max_new_tokens": max_new_tokens, "ignore_eos": True}, f"{prefix}-{i}"))
        for i in range(n)
    ]
