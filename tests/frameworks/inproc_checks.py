"""What the in-process frameworks' tests share: a prompt long enough to fill prefix-cache blocks,
and a wait until the engine's host holds a number of unfinished requests."""

from __future__ import annotations

import asyncio
import time

from .inproc_relay import Relay

# 256 prompt tokens: whole blocks of the prefix cache whatever the block size (16 to 128).
LONG_PROMPT = [(7 * i) % 200 + 10 for i in range(256)]


async def wait_unfinished(relay: Relay, n: int, method: str = "get_num_unfinished_requests", timeout_s: float = 60) -> None:
    """Poll *method* on the host until it counts *n* unfinished requests, then give them a moment
    to be scheduled (their first tokens)."""
    deadline = time.monotonic() + timeout_s
    while (count := await relay.call(method)) < n:
        assert time.monotonic() < deadline, f"setup: {count} of {n} requests in the engine after {timeout_s} s"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
