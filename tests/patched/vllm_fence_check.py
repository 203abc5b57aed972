"""Run by the vLLM venv's python with the patched overlay first on its path (test_patched_vllm.py):
the patched ``AsyncLLM.generate``/``abort``/``abort_all``/``get_request_counts``, the real code,
on a request held before the engine core. Only the engine core and the output processor are
stand-ins: on a real server the window between a generate() call and its add is too short to
hold open. Prints one JSON line of what it saw."""

from __future__ import annotations

import asyncio
import json

from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.output_processor import RequestOutputCollector

EVENTS: list[str] = []


class EngineCore:
    """Records what reaches the engine core, in order."""

    async def add_request_async(self, request_id: str) -> None:
        EVENTS.append(f"add {request_id}")

    async def abort_requests_async(self, request_ids: list[str]) -> None:
        if request_ids:
            EVENTS.append(f"abort {','.join(request_ids)}")

    def shutdown(self, timeout=None) -> None:
        """Nothing to stop."""

    async def call_utility_all_async(self, method: str) -> list:
        """vLLM 0.32 on: one answer per engine core."""
        assert method == "get_request_counts"
        return [(0, 0)]

    async def call_utility_async(self, method: str):
        """Before 0.32, with one engine core (no ``core_engines``)."""
        assert method == "get_request_counts"
        return (0, 0)


class OutputProcessor:
    """The real one's abort: the ids it had, each with a final "abort" output queued."""

    def __init__(self) -> None:
        self.external_req_ids: dict[str, list[str]] = {}
        self.queues: dict[str, RequestOutputCollector] = {}
        self.request_states = self.queues
        self.parent_requests: dict = {}

    def abort_requests(self, request_ids, internal):
        ids = list(request_ids) if internal else [i for e in request_ids for i in self.external_req_ids.pop(e, [])]
        aborted = []
        for rid in ids:
            queue = self.queues.pop(rid, None)
            if queue is not None:
                done = CompletionOutput(index=0, text="", token_ids=[], cumulative_logprob=None, logprobs=None,
                                        finish_reason="abort")
                queue.put(RequestOutput(rid, None, [1], None, [done], finished=True))
                aborted.append(rid)
        return aborted


def held_llm(gate: asyncio.Event) -> AsyncLLM:
    """An AsyncLLM (patched code) whose add_request waits at *gate* before registering the request."""
    llm = AsyncLLM.__new__(AsyncLLM)
    llm._requests_before_engine_core = set()
    llm.log_requests = False
    llm.engine_core = EngineCore()
    llm.output_processor = OutputProcessor()

    async def add_request(request_id, prompt, params, **kwargs):
        await gate.wait()  # tokenizing / rendering: the engine core does not have it yet
        internal = f"{request_id}-abcd1234"
        queue = RequestOutputCollector(RequestOutputKind.FINAL_ONLY, internal)
        llm.output_processor.external_req_ids[request_id] = [internal]
        llm.output_processor.queues[internal] = queue
        await llm.engine_core.add_request_async(internal)
        return queue

    llm.add_request = add_request
    return llm


async def one(abort) -> dict:
    """One generate() held before the engine core, covered by *abort*, then let through."""
    EVENTS.clear()
    gate = asyncio.Event()
    llm = held_llm(gate)

    async def generate():
        return [out async for out in llm.generate([1], SamplingParams(max_tokens=100), "ext-1")]

    task = asyncio.create_task(generate())
    for _ in range(1000):  # generate() reaches add_request within a few loop turns
        if llm._requests_before_engine_core:
            break
        await asyncio.sleep(0)
    else:
        raise AssertionError("generate() never recorded its request as held before the engine core")
    counts = await llm.get_request_counts()
    aborted = await abort(llm)
    gate.set()
    outputs = await asyncio.wait_for(task, 10)
    return {"counts_while_held": counts, "aborted": aborted, "events": list(EVENTS),
            "finish_reasons": [o.outputs[0].finish_reason for o in outputs],
            "counts_after": await llm.get_request_counts(),
            "abort_again": await abort(llm)}


async def main() -> None:
    by_id = await one(lambda llm: llm.abort(["ext-1"]))
    every = await one(lambda llm: llm.abort_all())
    print(json.dumps({"by_id": by_id, "abort_all": every}))


asyncio.run(main())
