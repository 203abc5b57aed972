"""Fakes of the engines' internals (one per engine), for tests only: never shipped in the wheel.

Each fake follows its engine's source closely enough that the engine's real plugin code runs on
it, and serves the engine's native routes, with or without the plugin. Importable as ``fakes``
(``tests/`` is on the path of the test session and of the servers it starts).
"""

import asyncio
import os
import sys
import traceback
from typing import Any, Optional


def answer(future: asyncio.Future, result: Any = None, error: Optional[BaseException] = None) -> None:
    """Answer a caller waiting on *future*, unless it has stopped waiting (its task was
    cancelled): the engines' IPC clients drop such an answer (vLLM's ``_process_utility_output``
    catches the InvalidStateError) rather than let it end their loop."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


# The fake engine loops running, held until they end: asyncio keeps only weak references to
# tasks, and a loop waiting on its own queue, held by nothing else (a unit test's fake, once the
# test is over, in a test session's shared event loop), is garbage to collect: collected, its
# coroutine is closed and its next step fails ("cannot reuse already awaited coroutine").
_LOOPS: set[asyncio.Task] = set()


def end_server_if_it_dies(task: asyncio.Task) -> asyncio.Task:
    """A fake engine loop that raises ends the server process, as a dead engine core ends
    vLLM's and SGLang's servers: a wedged server would leave every later request waiting."""
    _LOOPS.add(task)

    def check(done: asyncio.Task) -> None:
        _LOOPS.discard(done)
        if done.cancelled() or done.exception() is None:
            return
        error = done.exception()
        print(f"fake engine loop {done.get_name()} died, ending the server:", file=sys.stderr)
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        sys.stderr.flush()
        os._exit(70)

    task.add_done_callback(check)
    return task
