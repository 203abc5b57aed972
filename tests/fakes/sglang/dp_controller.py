"""The data-parallel controller (``--dp-size N``), following ``managers/data_parallel_controller.py``
(0.5.23): requests go to one rank, round robin (``round_robin_scheduler``, 880-899); every other
message (abort, pause, continue, a version change) goes to every rank (``send_control_message``,
274-278, the dispatcher's fallback, 400-418).

A version change is a communicator call with one reply per rank (the TokenizerManager's
``update_weight_version_communicator`` has a fan-out of the DP size,
``tokenizer_control_mixin.py:200-215``): the controller gives each rank its own reply and
resolves the caller's once every rank has answered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .. import answer
from .io_struct import TokenizedGenerateReqInput
from .scheduler import FakeScheduler, WeightVersionChange


class FakeDataParallelController:
    """Routes the TokenizerManager's messages to the ranks' schedulers."""

    def __init__(self, schedulers: list[FakeScheduler]) -> None:
        self.schedulers = schedulers
        self.round_robin_counter = 0

    def send(self, msg: Any) -> None:
        """What the TokenizerManager sends to the controller (fire and forget, in order)."""
        if isinstance(msg, TokenizedGenerateReqInput):
            rank = self.round_robin_counter
            self.round_robin_counter = (rank + 1) % len(self.schedulers)
            self.schedulers[rank].inbox.put_nowait(msg)
        elif isinstance(msg, WeightVersionChange):
            loop = asyncio.get_running_loop()
            replies = [loop.create_future() for _ in self.schedulers]
            for scheduler, reply in zip(self.schedulers, replies):
                scheduler.inbox.put_nowait(WeightVersionChange(msg.new_version, reply))
            gathered = asyncio.gather(*replies)
            gathered.add_done_callback(lambda _: answer(msg.done))
        else:
            for scheduler in self.schedulers:
                scheduler.inbox.put_nowait(msg)
