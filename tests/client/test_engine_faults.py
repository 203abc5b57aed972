"""Faults on a server of each kind, seen through the RL-side client: a server that stops
answering (its calls time out, and it loses nothing once it answers again), and an engine that
dies while the client waits on an abort (the wait ends with an error, never hangs).

The stop runs on the session's server, which goes on once continued. The engine's death needs a
server of its own: the engine's fake (killed as a whole, having no engine process of its own) or
the real engine (the engine processes under the API server are killed, as a crash of the engine
core or the scheduler would).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Iterator

import pytest

from engine_plugins.client import ServerClient
from engine_plugins.client.errors import ServerError
from targets import TARGETS, Target

from .helpers import start_generations, wait_in_flight

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub", "vllm", "vllm-stub")]


class OwnServer:
    """A server of the target's kind that the test may stop, continue or kill."""

    def __init__(self, target: Target) -> None:
        self.url = target.url
        self.api_key = target.api_key
        assert target.process is not None, f"setup: target {target.name} has no process of its own"
        self.process = target.process
        self.pid = target.process.pid
        self.real = target.real

    def kill_engine(self) -> None:
        """Kill the engine: on a real server the processes the API server spawned (vLLM's engine
        core, SGLang's scheduler and detokenizer); a fake is killed as a whole."""
        if not self.real:
            os.kill(self.pid, signal.SIGKILL)
            return
        # Every child: the engine core or scheduler and detokenizer (renamed by setproctitle,
        # so not found by their command line), and multiprocessing's resource tracker.
        children = _children(self.pid)
        assert children, "setup: the real server has no engine process to kill"
        for pid in children:
            os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    # Every thread's children: the engine processes are started from other threads too.
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(FileNotFoundError):
            children += [int(p) for p in (task / "children").read_text().split()]
    return children


@contextlib.contextmanager
def own_server(target_name: str, tmp: Path) -> Iterator[OwnServer]:
    """A server of its own, set up as the session's target *target_name* is (tests/targets*.py)."""
    with TARGETS[target_name](tmp) as own:
        yield OwnServer(own)


async def test_a_server_that_stops_answering_times_out_and_loses_nothing_once_it_answers(target):
    # SIGSTOP to every process of the server (API and engine): it accepts nothing, answers nothing.
    async with ServerClient(target.url, api_key=target.api_key) as client:
        generation = asyncio.create_task(client.partial_generate([1, 2, 3], {"max_new_tokens": 400, "ignore_eos": True}, "frozen"))
        await wait_in_flight(client, 1, [generation])
        target.signal(signal.SIGSTOP)
        try:
            with pytest.raises(ServerError) as loads_failure:
                await client.loads(timeout_s=1.0)
            with pytest.raises(ServerError) as abort_failure:
                await client.abort(request_ids=["not-in-flight"], timeout_s=1.0)
        finally:
            target.signal(signal.SIGCONT)
        result = await generation
        load = await client.loads()
    assert loads_failure.value.kind == "timeout" and abort_failure.value.kind == "timeout"
    assert result.finish_reason == "length" and len(result.output_ids) == 400, "the request outlived the stop"
    assert load.idle and load.total == 0


async def test_an_engine_that_dies_during_an_abort_with_wait_ends_the_wait_with_an_error(target, tmp_path):
    with own_server(target.name, tmp_path) as server:
        async with ServerClient(server.url, api_key=server.api_key) as client:
            generations = start_generations(client, 4, max_new_tokens=2000, prefix="dies")
            await wait_in_flight(client, 4, generations)
            server.kill_engine()
            try:
                outcome = await client.abort(wait=True, timeout_s=120)
            except ServerError as exc:
                outcome = exc
            results = await asyncio.gather(*generations, return_exceptions=True)
            # A server whose engine died goes away as a whole (SGLang's watchdog, vLLM's
            # engine-dead handler), rather than accepting calls it can never answer.
            for _ in range(240):
                if server.process.poll() is not None:
                    break
                await asyncio.sleep(0.5)
            exited = server.process.poll() is not None
            with pytest.raises(ServerError) as after:
                await client.loads(timeout_s=5)
    # The wait ends: with an error (the server went away or failed the call), or where the
    # server released every request as its engine died, idle; then the server is gone.
    # Never a hang, never a wait that runs out.
    assert isinstance(outcome, ServerError) or (outcome.idle and not outcome.timed_out), outcome
    assert exited, "the server outlived its engine by two minutes"
    assert after.value.kind in ("unreachable", "disconnected"), after.value
    for result in results:
        assert isinstance(result, Exception) or result.cancelled, result
