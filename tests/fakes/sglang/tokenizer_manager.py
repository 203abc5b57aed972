"""The TokenizerManager side, following ``managers/tokenizer_manager.py`` of SGLang 0.5.23.

Method names, order of steps and data shapes are SGLang's, since the plugin wraps and calls
them; line numbers are cited where the plugin depends on the behaviour.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import types
from typing import Any, AsyncIterator, Optional

from .. import end_server_if_it_dies
from .io_struct import (AbortReq, BeginWeightUpdateReqInput, ContinueGenerationReqInput, EndWeightUpdateReqInput, GenerateReqInput,
                        GetLoadsReqOutput, PauseGenerationReqInput, QueueMetrics, TokenizedGenerateReqInput,
                        UpdateWeightFromDiskReqInput, UpdateWeightsFromTensorReqInput, UpdateWeightVersionReqInput)
from .dp_controller import FakeDataParallelController
from .scheduler import BatchOut, FakeScheduler, WeightsCall, WeightVersionChange

HEALTH_CHECK_RID_PREFIX = "HEALTH_CHECK"  # constants.py:12


@dataclasses.dataclass
class ReqState:
    """``ReqState`` (267-330): the fields the plugin and this fake use."""

    out_list: list
    finished: bool
    event: asyncio.Event
    obj: Any
    dispatched: bool = False
    abort_sent: bool = False
    output_ids: list = dataclasses.field(default_factory=list)
    output_token_logprobs: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class LoadSnapshot:
    """``managers/load_snapshot.py``: one DP rank's figures; ``to_dict`` keeps every field."""

    dp_rank: int
    num_running_reqs: int
    num_waiting_reqs: int
    num_used_tokens: int = 0
    max_total_num_tokens: int = 131072
    queues: dict = dataclasses.field(default_factory=dict)

    def to_dict(self, include: Optional[set] = None) -> dict:
        """As SGLang's: core keys plus the sections."""
        out = dataclasses.asdict(self)
        out["num_total_reqs"] = self.num_running_reqs + self.num_waiting_reqs
        return out


class TokenizerManager:
    """Accepts requests, holds them at the pause gate, dispatches them to the scheduler task
    (with ``dp_size`` > 1: to the data-parallel controller in front of one scheduler per rank)."""

    def __init__(self, step_s: float = 0.002, tokenize_s: float = 0.0, deterministic: bool = True, context_len: int = 2048,
                 dp_size: int = 1, aborted_answer_delay_s: float = 0.0) -> None:
        """*aborted_answer_delay_s*: how long the request's task takes, once its state is
        deleted, to hand on the final output of an aborted request (see ``_wait_one_response``)."""
        self.aborted_answer_delay_s = aborted_answer_delay_s
        self.rid_to_state: dict[str, ReqState] = {}  # 710
        self.is_pause = False  # 777-778
        self.is_pause_cond = asyncio.Condition()
        self.tokenize_s = tokenize_s
        self.context_len = context_len
        self.incremental_streaming_output = False
        self._weight_version = "default"
        self._recv: asyncio.Queue = asyncio.Queue()
        self.schedulers = [FakeScheduler(self._recv.put_nowait, step_s, deterministic) for _ in range(dp_size)]
        self.scheduler = self.schedulers[0]
        # With one rank the TokenizerManager talks to the scheduler directly (engine.py starts
        # no controller); with more, through the controller.
        self.dp_controller = FakeDataParallelController(self.schedulers) if dp_size > 1 else None
        # SGLang's ModelConfig: the plugin reads its vocab_size (configs/model_config.py).
        self.model_config = types.SimpleNamespace(vocab_size=self.scheduler.vocab_size)
        self._tasks: list[asyncio.Task] = []

    def auto_create_handle_loop(self) -> None:
        """Start the handle loop (2440) and, here, the scheduler 'process', on first use."""
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [end_server_if_it_dies(task) for task in (*(loop.create_task(s.run()) for s in self.schedulers),
                                                                    loop.create_task(self.handle_loop()))]

    async def handle_loop(self) -> None:
        """2465-2478: outputs and abort echoes from the scheduler, in order."""
        while True:
            msg = await self._recv.get()
            if isinstance(msg, BatchOut):
                self._handle_batch_output(msg)
            elif isinstance(msg, AbortReq):
                self._handle_abort_req(msg)

    def _dispatch_to_scheduler(self, obj: Any) -> None:
        """698: fire-and-forget send."""
        if self.dp_controller is not None:
            self.dp_controller.send(obj)
        else:
            self.scheduler.inbox.put_nowait(obj)

    async def _async_dispatch_to_scheduler(self, obj: Any) -> None:
        self._dispatch_to_scheduler(obj)

    # --- the request path ----------------------------------------------------------------

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[dict]:
        """895-967: state first, then the pause gate, then tokenize and dispatch (945-949)."""
        self.auto_create_handle_loop()
        obj.normalize_batch_and_arguments()
        self._init_req_state(obj, request)
        request_states = {obj.rid: self.rid_to_state[obj.rid]}
        try:
            async with self.is_pause_cond:  # 938-939
                await self.is_pause_cond.wait_for(lambda: not self.is_pause)
            tokenized_obj = await self._tokenize_one_request(obj)
            await self._send_one_request(tokenized_obj)
            async for response in self._wait_one_response(obj, request):
                yield response
        except BaseException:
            self._release_req_states_on_failure(request_states)  # 957-967
            raise

    def _init_req_state(self, obj: GenerateReqInput, request: Any = None) -> None:
        """3798-3848: a duplicate rid is a ValueError; states are added with ``update``."""
        if obj.rid in self.rid_to_state:
            raise ValueError(f"Duplicate request ID detected: {obj.rid}")
        self.rid_to_state.update({obj.rid: ReqState([], False, asyncio.Event(), obj)})

    def _validate_one_request(self, obj: GenerateReqInput) -> None:
        """Requests past the context length are refused (a 400 at the HTTP layer)."""
        max_new = obj.sampling_params.get("max_new_tokens", 128)
        if len(obj.input_ids) + max_new > self.context_len:
            raise ValueError(f"Requested token count exceeds the model's maximum context length of {self.context_len}")
        unknown = set(obj.sampling_params) - {"max_new_tokens", "temperature", "top_p", "top_k", "ignore_eos", "stop_token_ids", "sampling_seed"}
        if unknown:
            raise ValueError(f"Unexpected keyword argument {sorted(unknown)[0]!r}")

    async def _tokenize_one_request(self, obj: GenerateReqInput) -> TokenizedGenerateReqInput:
        """1096-1274: tokenize (awaited), validate, then build the tokenized object (1271-1274)."""
        if self.tokenize_s:
            await asyncio.sleep(self.tokenize_s)
        self._validate_one_request(obj)
        return self._create_tokenized_object(obj, obj.text, obj.input_ids)

    def _create_tokenized_object(self, obj: GenerateReqInput, input_text: Optional[str], input_ids: Optional[list[int]],
                                 input_embeds: Any = None, mm_inputs: Any = None,
                                 token_type_ids: Optional[list[int]] = None) -> TokenizedGenerateReqInput:
        """1533-1640: the object the scheduler receives; ``extra_key`` and ``cache_salt`` copied
        from the request (1618-1619), so a hook here can rescope its prefix cache."""
        return TokenizedGenerateReqInput(rid=obj.rid, input_ids=list(input_ids), sampling_params=dict(obj.sampling_params),
                                         stream=obj.stream, extra_key=obj.extra_key, cache_salt=obj.cache_salt)

    async def _send_one_request(self, tokenized_obj: TokenizedGenerateReqInput) -> None:
        """1769-1800: await the transports, then dispatch and mark dispatched, with no await between."""
        await asyncio.sleep(0)
        self._dispatch_to_scheduler(tokenized_obj)
        self._mark_state_dispatched(tokenized_obj.rid)

    async def _send_batch_request(self, tokenized_objs: list[TokenizedGenerateReqInput]) -> None:
        """1812-1850: one message for the batch, then each state marked (this fake's requests
        are single, so only the plugin's manifest check sees it)."""
        await asyncio.sleep(0)
        self._dispatch_to_scheduler(list(tokenized_objs))
        for tokenized_obj in tokenized_objs:
            self._mark_state_dispatched(tokenized_obj.rid)

    def _mark_state_dispatched(self, rid: str) -> None:
        """1802-1810."""
        state = self.rid_to_state.get(rid)
        if state is not None:
            state.dispatched = True

    async def _wait_one_response(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[dict]:
        """1946-2072: drain ``out_list``, keep the last; non-stream yields only the final output."""
        state = self.rid_to_state[obj.rid]
        while True:
            await state.event.wait()
            out_list, state.out_list = state.out_list, []
            finished = state.finished
            state.event.clear()
            out = out_list[-1]
            if finished:
                reason = out["meta_info"].get("finish_reason")
                if isinstance(reason, dict) and reason.get("type") == "abort":
                    status = reason.get("status_code")  # _handle_abort_finish_reason (1891-1922)
                    if status is not None and 400 <= status < 600 and not obj.stream:
                        raise ValueError(reason["message"])
                    if self.aborted_answer_delay_s:
                        # SGLang deletes the state in its output loop (2774), before this task
                        # runs: the answer is built and written only after that, and after an
                        # abort, with many answers at once, later. Here always, by this much.
                        await asyncio.sleep(self.aborted_answer_delay_s)
                yield out
                break
            if obj.stream:
                yield out

    def _release_req_states_on_failure(self, request_states: dict) -> None:
        """3850-3874: undispatched states are dropped; dispatched ones are aborted and kept."""
        for rid, state in request_states.items():
            if self.rid_to_state.get(rid) is not state:
                continue
            if state.dispatched:
                self.abort_request(rid)
            else:
                del self.rid_to_state[rid]

    def _handle_batch_output(self, out: BatchOut) -> None:
        """2480-2798: accumulate, build the chunk, delete the state when finished."""
        state = self.rid_to_state.get(out.rid)
        if state is None:
            return
        meta_info = {
            "id": out.rid,
            "finish_reason": out.finished_reason,
            "prompt_tokens": len(state.obj.input_ids),
            "weight_version": self._weight_version,
            "completion_tokens": out.completion_tokens,
            "cached_tokens": out.cached_tokens,  # 2557
        }
        state.output_ids.extend(out.new_ids)
        if state.obj.return_logprob:
            state.output_token_logprobs.extend((lp, t, None) for lp, t in zip(out.new_logprobs, out.new_ids))
            meta_info["output_token_logprobs"] = state.output_token_logprobs  # shared, cumulative
        if out.weight_versions is not None:
            _add_weight_versions(meta_info, out.weight_versions, out.completion_tokens)
        state.finished = out.finished_reason is not None
        if state.obj.stream:
            # Non-incremental: intermediate chunks share the state's list (2663-2667).
            ids = state.output_ids.copy() if state.finished else state.output_ids
            chunk: Optional[dict] = {"text": None if not state.finished else "", "output_ids": ids, "meta_info": meta_info}
        else:
            chunk = {"text": "", "output_ids": state.output_ids.copy(), "meta_info": meta_info} if state.finished else None
        if state.finished:
            del self.rid_to_state[out.rid]  # 2774
        if chunk is not None:
            state.out_list.append(chunk)
            state.event.set()

    def _handle_abort_req(self, recv: AbortReq) -> None:
        """3577-3643: a request aborted in the scheduler's waiting queue; built from accumulated state."""
        state = self.rid_to_state.get(recv.rid)
        if state is None:
            return
        state.finished = True
        finish_reason = recv.finished_reason or {"type": "abort", "message": recv.abort_message or "Abort in waiting queue"}
        meta_info: dict[str, Any] = {"id": recv.rid, "finish_reason": finish_reason, "weight_version": self._weight_version, "e2e_latency": 0.0}
        if recv.weight_versions is not None:
            _add_weight_versions(meta_info, recv.weight_versions, len(state.output_ids))
        if state.obj.return_logprob:
            meta_info["output_token_logprobs"] = state.output_token_logprobs
        meta_info["completion_tokens"] = len(state.output_ids)
        out = {"text": "", "output_ids": state.output_ids, "meta_info": meta_info}
        del self.rid_to_state[recv.rid]
        state.out_list.append(out)
        state.event.set()

    # --- control ---------------------------------------------------------------------------

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        """2241-2265: fire-and-forget; an unknown rid sends nothing; ``abort_sent`` sends once."""
        if not abort_all and not rid:
            return
        state = None if abort_all else self.rid_to_state.get(rid)
        if not abort_all:
            if state is None:
                return
            if state.abort_sent:
                return
            state.abort_sent = True
        self._dispatch_to_scheduler(AbortReq(rid=rid, abort_all=abort_all))

    async def pause_generation(self, obj: PauseGenerationReqInput) -> None:
        """2267-2280: close the gate; forward in_place/retract; abort mode polls every second."""
        self.auto_create_handle_loop()
        async with self.is_pause_cond:
            self.is_pause = True
            if obj.mode != "abort":
                await self._async_dispatch_to_scheduler(obj)
            else:
                while True:
                    self.abort_request(abort_all=True)
                    if not any(s.dispatched for s in self.rid_to_state.values()):
                        break
                    await asyncio.sleep(1.0)

    async def continue_generation(self, obj: ContinueGenerationReqInput) -> None:
        """2282-2286."""
        self.auto_create_handle_loop()
        async with self.is_pause_cond:
            self.is_pause = False
            await self._async_dispatch_to_scheduler(obj)
            self.is_pause_cond.notify_all()

    async def update_weight_version(self, obj: UpdateWeightVersionReqInput) -> None:
        """control mixin 1065-1079: the scheduler records the change, then the version is set."""
        self.auto_create_handle_loop()
        done = asyncio.get_running_loop().create_future()
        self._dispatch_to_scheduler(WeightVersionChange(obj.new_version, done))
        await done
        self.record_config_updates("tokenizer.weight_version", weight_version=obj.new_version)

    async def get_loads(self, include: Any = None, dp_rank: Optional[int] = None) -> list[LoadSnapshot]:
        """control mixin 1001-1029: each rank's last snapshot (frozen while paused), one per rank."""
        self.auto_create_handle_loop()
        loads = []
        for rank, scheduler in enumerate(self.schedulers):
            running, waiting = scheduler.snapshot
            loads.append(LoadSnapshot(rank, running, waiting, queues={"waiting": waiting, "paused": 0}))
        return loads if dp_rank is None else [load for load in loads if load.dp_rank == dp_rank]

    # --- weight updates (tokenizer_manager.py:2288-2322, tokenizer_control_mixin.py:485-596) ---

    async def _weights_call(self, kind: str, obj: Any) -> tuple[bool, str]:
        """One communicator call to every rank's scheduler; the merged answer."""
        loop = asyncio.get_running_loop()
        replies = [loop.create_future() for _ in self.schedulers]
        for scheduler, reply in zip(self.schedulers, replies):
            scheduler.inbox.put_nowait(WeightsCall(kind, obj, reply))
        answers = await asyncio.gather(*replies)
        failed = [a for a in answers if not a[0]]
        return failed[0] if failed else answers[0]

    async def _update_weights(self, kind: str, obj: Any) -> tuple[bool, str]:
        """The pattern of every update: abort when asked, then, unless paused, SGLang's writer
        lock, which every request holds as a reader for its whole life: the update waits for
        all of them to end."""
        self.auto_create_handle_loop()
        if obj.abort_all_requests:
            self.abort_request(abort_all=True)
        async with self.is_pause_cond:
            is_paused = self.is_pause
        if not is_paused:
            while self.rid_to_state:
                await asyncio.sleep(self.scheduler.step_s)
        success, message = await self._weights_call(kind, obj)
        if success and obj.weight_version is not None:
            self._update_weight_version_if_provided(obj.weight_version)  # only on success
            message += f" Weight version updated to {obj.weight_version}."
        return success, message

    async def update_weights_from_disk(self, obj: UpdateWeightFromDiskReqInput, request: Any = None) -> tuple[bool, str, int]:
        """2288-2322."""
        success, message = await self._update_weights("disk", obj)
        return success, message, 0

    async def update_weights_from_tensor(self, obj: UpdateWeightsFromTensorReqInput, request: Any = None) -> tuple[bool, str]:
        """control mixin 563-596."""
        return await self._update_weights("tensor", obj)

    async def begin_weight_update(self, obj: BeginWeightUpdateReqInput, request: Any = None) -> tuple[bool, str]:
        """control mixin 485-492 (paused here: no writer lock)."""
        self.auto_create_handle_loop()
        return await self._weights_call("begin", obj)

    async def end_weight_update(self, obj: EndWeightUpdateReqInput, request: Any = None) -> tuple[bool, str]:
        """control mixin 494-501."""
        self.auto_create_handle_loop()
        return await self._weights_call("end", obj)

    def _update_weight_version_if_provided(self, weight_version: Optional[str]) -> None:
        """control mixin 1072-1078: a weight update's version, recorded as a config value."""
        if weight_version is not None:
            self.record_config_updates("tokenizer.weight_version", weight_version=weight_version)

    def record_config_updates(self, source: str, **fields: Any) -> None:
        """2324-2331: a control-plane change of the config values; only the weight version is faked."""
        if "weight_version" in fields:
            self._weight_version = fields["weight_version"]

    def config_value(self, name: str) -> Any:
        """2333-2337; only the weight version is faked."""
        if name != "weight_version":
            raise KeyError(name)
        return self._weight_version


def _add_weight_versions(meta_info: dict, spans: list[dict], num_output_tokens: int) -> None:
    """``utils/weight_versions.py:add_weight_versions_to_meta_info``."""
    visible = [s for s in spans if s["start"] < num_output_tokens or s["start"] == 0]
    meta_info["weight_versions"] = [{**s, "end": min(s["end"], num_output_tokens)} for s in visible]
    if visible:
        meta_info["weight_version"] = visible[-1]["version"]


class TokenizerManager0519(TokenizerManager):
    """SGLang 0.5.19's differences (``managers/tokenizer_manager.py`` of 0.5.19): the sends are
    synchronous and mark nothing (no ``_mark_state_dispatched``; the plugin hooks the sends), a
    failed or closed request only has its states dropped (``_discard_pending_req_states``,
    820-835: a dispatched one runs on in the scheduler), and every abort is sent (no ``abort_sent``,
    1964-1981)."""

    failure_drops_states_on: tuple = (BaseException,)
    """What the failure path catches to drop the states (``except BaseException``, 827): a
    cancelled request's too. 0.5.14 to 0.5.16 catch ``Exception`` only, 0.5.12 and 0.5.13 nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._past_gate = 0

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[dict]:
        """780-835: as 0.5.23's, with the synchronous send and the failure path that only drops states."""
        self.auto_create_handle_loop()
        obj.normalize_batch_and_arguments()
        self._init_req_state(obj, request)
        try:
            async with self.is_pause_cond:
                await self.is_pause_cond.wait_for(lambda: not self.is_pause)
            # Past the gate a request holds model_update_lock's reader lock, which the abort
            # pause waits on; a count stands for it here.
            self._past_gate += 1
            try:
                tokenized_obj = await self._tokenize_one_request(obj)
                self._send_one_request(tokenized_obj)
                async for response in self._wait_one_response(obj, request):
                    yield response
            finally:
                self._past_gate -= 1
        except self.failure_drops_states_on:
            self._discard_pending_req_states(obj)
            raise

    def _send_one_request(self, tokenized_obj: TokenizedGenerateReqInput) -> None:  # type: ignore[override]
        """1557-1577."""
        self._dispatch_to_scheduler(tokenized_obj)

    def _send_batch_request(self, tokenized_objs: list[TokenizedGenerateReqInput]) -> None:  # type: ignore[override]
        """1579-1610."""
        self._dispatch_to_scheduler(list(tokenized_objs))

    def _discard_pending_req_states(self, obj: GenerateReqInput) -> None:
        """3443-3455: whatever states are left are dropped; the scheduler is not told."""
        self.rid_to_state.pop(obj.rid, None)

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        """1964-1981: an unknown rid sends nothing; a known one is sent every time."""
        if not abort_all and (not rid or rid not in self.rid_to_state):
            return
        self._dispatch_to_scheduler(AbortReq(rid=rid, abort_all=abort_all))

    async def pause_generation(self, obj: PauseGenerationReqInput) -> None:
        """1983-1996: abort mode aborts every second until no request holds the update lock."""
        if obj.mode != "abort":
            await super().pause_generation(obj)
            return
        self.auto_create_handle_loop()
        async with self.is_pause_cond:
            self.is_pause = True
            while True:
                self.abort_request(abort_all=True)
                if not self._past_gate:
                    break
                await asyncio.sleep(1.0)


class _Absent:
    """A method a release lacks: its class answers ``hasattr`` with False, as SGLang's would."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        raise AttributeError(f"this SGLang release's TokenizerManager has no {self.name}")


class TokenizerManager0518(TokenizerManager0519):
    """SGLang 0.5.18's differences from 0.5.19 (``managers/tokenizer_manager.py`` and
    ``tokenizer_control_mixin.py`` of 0.5.18): no ``update_weight_version``, and no weight version
    in the scheduler, which labels no tokens (no ``meta_info.weight_versions``); the version is the
    TokenizerManager's config value alone, set by ``record_config_updates`` (2065-2072) from the
    HTTP route (``entrypoints/http_server.py:1432-1463``) and after a successful weight update
    (control mixin 928-935). The request path, aborts and pauses are 0.5.19's."""

    update_weight_version = _Absent()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for scheduler in self.schedulers:
            scheduler.keeps_weight_version = False


class RequestAbortedError(ValueError):
    """0.5.17 ``managers/tokenizer_manager.py:198``: a request its abort marked, before dispatch."""


@dataclasses.dataclass
class ReqState0517(ReqState):
    """0.5.17's ``ReqState`` (202-230): marked by ``abort_request`` (``abort_requested``), owned by a
    lifecycle (the logical request's, for its samples), and marked dispatched by the sends."""

    abort_requested: bool = False
    lifecycle_id: object = dataclasses.field(default_factory=object)


class TokenizerManager0517(TokenizerManager0518):
    """SGLang 0.5.17's differences from 0.5.18 (``managers/tokenizer_manager.py`` of 0.5.17): the
    sends mark ``ReqState.dispatched`` themselves (1549-1551, 1574-1576); ``abort_request`` marks
    the states it covers ``abort_requested`` (1930-1970: every state that is not a sample's for
    ``abort_all``), and a marked request raises ``RequestAbortedError`` at its next check before
    dispatch (785, 789, 794: past the pause gate, past the update lock, after tokenizing); the
    failure path aborts the dispatched requests and removes every state the request owns
    (``_discard_pending_req_states``, 3483-3535). This fake's requests are single, so it has no
    logical ``n > 1`` states (``_init_child_req_state``, 3365-3380), only the names."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.child_rid_to_logical_rid: dict[str, str] = {}
        self.logical_rid_to_child_rids: dict[str, set] = {}

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[dict]:
        """744-808: the state, the gate, a check, (the update lock), tokenize, a check, send."""
        self.auto_create_handle_loop()
        obj.normalize_batch_and_arguments()
        lifecycles = self._init_req_state(obj, request)
        try:
            async with self.is_pause_cond:
                await self.is_pause_cond.wait_for(lambda: not self.is_pause)
            self._raise_if_logical_rid_aborted(obj.rid)
            self._past_gate += 1  # model_update_lock's reader lock (788)
            try:
                tokenized_obj = await self._tokenize_one_request(obj)
                self._raise_if_logical_rid_aborted(obj.rid)
                self._send_one_request(tokenized_obj)
                async for response in self._wait_one_response(obj, request):
                    yield response
            finally:
                self._past_gate -= 1
        except BaseException:
            self._discard_pending_req_states(obj, lifecycles)
            raise

    def _init_req_state(self, obj: GenerateReqInput, request: Any = None) -> dict:  # type: ignore[override]
        """3414-3481: a duplicate rid is a ValueError; returns each state's lifecycle."""
        if obj.rid in self.rid_to_state or obj.rid in self.child_rid_to_logical_rid:
            raise ValueError(f"Duplicate request ID detected: {obj.rid}")
        state = ReqState0517([], False, asyncio.Event(), obj)
        self.rid_to_state[obj.rid] = state
        return {obj.rid: state.lifecycle_id}

    def _init_child_req_state(self, logical_rid: str, obj: GenerateReqInput, request: Any = None) -> None:
        """3365-3380: a sample's state, in its logical request's lifecycle (never called here)."""
        raise NotImplementedError("the SGLang fake serves single requests only")

    def _raise_if_logical_rid_aborted(self, logical_rid: str) -> None:
        """3405-3408."""
        state = self.rid_to_state.get(logical_rid)
        if state is None or state.abort_requested:
            raise RequestAbortedError(f"Request {logical_rid} was aborted")

    def _send_one_request(self, tokenized_obj: TokenizedGenerateReqInput) -> None:  # type: ignore[override]
        """1540-1553: dispatch, then mark the state."""
        self._dispatch_to_scheduler(tokenized_obj)
        state = self.rid_to_state.get(tokenized_obj.rid)
        if state is not None:
            state.dispatched = True

    def _send_batch_request(self, tokenized_objs: list[TokenizedGenerateReqInput]) -> None:  # type: ignore[override]
        """1555-1578."""
        self._dispatch_to_scheduler(list(tokenized_objs))
        for tokenized_obj in tokenized_objs:
            state = self.rid_to_state.get(tokenized_obj.rid)
            if state is not None:
                state.dispatched = True

    def _discard_pending_req_states(self, obj: GenerateReqInput, lifecycle_ids: Optional[dict] = None) -> None:  # type: ignore[override]
        """3483-3535: abort the request if it reached the scheduler, and remove its state (its
        own lifecycle's only)."""
        state = self.rid_to_state.get(obj.rid)
        if state is None or (lifecycle_ids is not None and state.lifecycle_id is not lifecycle_ids.get(obj.rid)):
            return
        if state.dispatched:
            self._dispatch_to_scheduler(AbortReq(rid=obj.rid, abort_all=False))
        del self.rid_to_state[obj.rid]

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        """1930-1970: mark, then send; an unknown rid sends nothing (one tokenizer worker)."""
        if not abort_all and not rid:
            return
        if abort_all:
            for state_rid, state in self.rid_to_state.items():
                if state_rid not in self.child_rid_to_logical_rid:
                    state.abort_requested = True
        elif rid in self.rid_to_state:
            self.rid_to_state[rid].abort_requested = True
        else:
            return
        self._dispatch_to_scheduler(AbortReq(rid=rid, abort_all=abort_all))


class ServerArgs0516:
    """0.5.16 ``server_args.py``: the fields the plugin reads, and ``override`` (7422-7450), the
    one setter of a resolved field (the weight version here)."""

    def __init__(self) -> None:
        self.weight_version = "default"

    def override(self, source: str, **fields: Any) -> None:
        """Set *fields*, recorded with their *source* in SGLang (not here)."""
        for name, value in fields.items():
            setattr(self, name, value)


class TokenizerManager0516(TokenizerManager0518):
    """SGLang 0.5.16's differences from 0.5.18 (its ``managers/tokenizer_manager.py``,
    ``tokenizer_control_mixin.py`` and ``entrypoints/http_server.py``): no config values
    (``config_value``, ``record_config_updates``); the weight version is the server args'
    (``server_args.weight_version``, read at 1930 and 2804), set by ``server_args.override`` from
    the HTTP route (``entrypoints/http_server.py:1368-1392``) and after a successful weight update
    (``_update_weight_version_if_provided``, control mixin 891-897). The request path, aborts
    and pauses are 0.5.18's, but for the failure path, which drops the states on an ``Exception``
    only (``except Exception``, 672): a request cancelled before dispatch keeps its state."""

    failure_drops_states_on = (Exception,)
    config_value = _Absent()
    record_config_updates = _Absent()

    @property
    def _weight_version(self) -> str:
        return self.server_args.weight_version

    @_weight_version.setter
    def _weight_version(self, version: str) -> None:
        self.__dict__.setdefault("server_args", ServerArgs0516()).override("init", weight_version=version)

    def _update_weight_version_if_provided(self, weight_version: Optional[str]) -> None:
        """control mixin 891-897."""
        if weight_version is not None:
            self.server_args.override("tokenizer.weight_version", weight_version=weight_version)


class TokenizerManager0515(TokenizerManager0516):
    """SGLang 0.5.15's difference from 0.5.16 that the plugin meets: ``--incremental-streaming-output``
    is only in the server args (0.5.15 ``managers/tokenizer_manager.py`` reads
    ``self.server_args.incremental_streaming_output`` at 1483, 1975 and 2025; 0.5.16 copies it onto
    the TokenizerManager, 290). Its weight version is set in the server args as 0.5.16's is
    (``_update_weight_version_if_provided``, control mixin 867-872, assigns it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_args.incremental_streaming_output = self.__dict__.pop("incremental_streaming_output")


class TokenizerManager0512(TokenizerManager0515):
    """SGLang 0.5.12's differences from 0.5.15 that the plugin meets (its
    ``managers/tokenizer_manager.py`` and ``tokenizer_control_mixin.py``): ``generate_request``
    has no failure path (516-560): a request that fails or is cancelled before dispatch keeps its
    state for ever; ``get_loads`` returns ``io_struct.GetLoadsReqOutput`` dataclasses (control
    mixin 808-848), not ``LoadSnapshot`` structs; and an abort echo for a rid it no longer holds
    raises ``KeyError`` in the output loop (``_handle_abort_req``, 2420: 0.5.14 looks it up with
    ``get``), which ends the server."""

    failure_drops_states_on = ()

    async def get_loads(self, include: Any = None, dp_rank: Optional[int] = None) -> list[GetLoadsReqOutput]:  # type: ignore[override]
        """control mixin 808-848: one dataclass per rank, with its ``timestamp`` and the sections
        it has not (None)."""
        return [GetLoadsReqOutput(dp_rank=load.dp_rank, timestamp=time.time(), num_running_reqs=load.num_running_reqs,
                                  num_waiting_reqs=load.num_waiting_reqs, queues=QueueMetrics(waiting=load.num_waiting_reqs))
                for load in await super().get_loads(include, dp_rank)]

    def _handle_abort_req(self, recv: AbortReq) -> None:
        """2418-2421: the state is looked up by index."""
        self.rid_to_state[recv.rid]  # KeyError for a rid already finished
        super()._handle_abort_req(recv)
