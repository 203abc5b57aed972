"""A fake of vLLM 0.32's ``AsyncLLM``, its ``OutputProcessor`` and its engine core, in one process.

It keeps the semantics the plugin depends on, each checked against vLLM 0.32.0's source
(``vllm/...`` file:line), and drops everything else (no model, no tokenizer, no ZMQ):

- ``generate`` (v1/engine/async_llm.py:698-823): add the request, then yield outputs from its
  collector until one is finished; cancelled or closed early, it aborts with ``internal=True``.
- External -> internal ids ``f"{external}-{random8}"`` (v1/engine/input_processor.py:354-371),
  tracked in ``OutputProcessor.external_req_ids`` (v1/engine/output_processor.py:521, 645).
- ``OutputProcessor.abort_requests`` (output_processor.py:552-614) returns the internal ids it
  actually aborted and puts a final ``finish_reason="abort"`` output with every token so far
  into each request's collector at once; ``AsyncLLM.abort`` (async_llm.py:911-922) discards it.
- Outputs are cumulative for CUMULATIVE and FINAL_ONLY, FINAL_ONLY only when finished
  (output_processor.py:428-482); ``weight_versions`` spans on finished outputs only (481,
  484-498), from the version the core stamps on every step's outputs (v1/engine/core.py:647-650).
- The engine core receives adds, aborts and utility calls in order on one queue (the ZMQ input
  socket, v1/engine/core_client.py:1237-1257) and looks utility methods up by name
  (core.py:1687-1698). Pause (core.py:2061-2103): ``abort`` finishes every request and sends
  abort outputs, then PAUSED_NEW; ``keep`` is PAUSED_ALL. In every mode new requests are queued
  in the scheduler and not scheduled (v1/core/sched/scheduler.py:615-617, 900-917).
- ``Scheduler.get_request_counts`` is ``(len(running), len(waiting))`` (scheduler.py:2608-2610).
- Prefix caching (:class:`KVCacheManager`): block hashes chained over full blocks, the request's
  ``cache_salt`` in the first one's; a request's hit, counted when it is admitted, is reported
  as ``RequestOutput.num_cached_tokens`` and in the ``prefix_cache_queries`` / ``_hits`` counters.

``AsyncLLM(pause_rejects_new=True)`` follows vLLM 0.33.0's changed pause instead: in ``abort``
(and ``wait``) mode the engine core rejects every new request until resume
(v1/engine/core.py:1759, 1796-1815, 2232-2236) with a finished output carrying
``RequestError("engine_paused", retryable=True)``; the output processor puts its exception
(``RetryableRequestError``, a 503: exceptions.py:139-144, outputs.py:23-35) into the request's
collector (v1/engine/output_processor.py:764-771) and ``generate`` raises it after aborting the
request (v1/engine/async_llm.py:820-827). ``keep`` still queues new requests.

``AsyncLLM(checkpoints=True)`` adds vLLM 0.34.0's process checkpoint (v1/engine/core.py): the
engine core's ``CheckpointState`` (v1/engine/__init__.py:44-61), ``checkpoint_prepare`` (a drain
with ``pause_generation(mode, clear_cache=False)``, PREPARED once it completes: core.py:2471-2496,
997-1016), ``checkpoint_restore`` (RESTORING, then ``wake_up(["kv_cache"])``: core.py:2498-2513),
``resume_scheduler`` refusing unless restored and moving RESTORING to RUNNING (core.py:1063-1073),
and ``EngineFaultedError`` (exceptions.py:203-214, a ``GracefulHTTPError`` answered 503) from
``generate`` while the engine is marked faulted (async_llm.py:355-364). The KV release of a
prepare is not modelled.

``AsyncLLM(stamp_versions=False)`` follows vLLM 0.30/0.31: the engine core stamps no weight
version on its outputs, so no spans come back (their ``CompletionOutput`` has no
``weight_versions``: outputs.py:33-66), and the client has no ``call_utility_all_async``, only
``_call_utility_async(method, engine=)`` per ``core_engines`` (v1/engine/core_client.py:1242, 723).

:class:`AsyncLLM026` follows vLLM 0.26: 0.31's, without any weight version (no
``update_weight_version``, ``get_weight_version``; the plugin keeps the version in the engine
core with its own utilities) and without ``VLLMClientError`` (:class:`FakeNotFoundError`).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import enum
import random
import uuid
import zlib
from collections import OrderedDict, defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Iterable, Optional

from .. import answer, end_server_if_it_dies

EOS_TOKEN_ID = 2

ABORTED_ANSWER: contextvars.ContextVar[Optional[dict]] = contextvars.ContextVar("fake_vllm_aborted_answer", default=None)
"""Set by the fake server per HTTP request (a dict); ``generate`` sets its ``"aborted"`` when it
yields an aborted final output, so that the server can slow that answer down."""


class FakeValidationError(ValueError):
    """Stands for ``vllm.exceptions.VLLMValidationError`` (exceptions.py:28)."""


class RequestOutputKind(enum.Enum):
    """sampling_params.py:205-211."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


# See resume_generation: long enough for a racing HTTP call to reach the engine meanwhile (the
# pause race test sends its pause at most 20 ms after the resume), and short, since every round
# of the race soak pays it for each resume.
RESUME_ANSWER_DELAY_S = 0.04


class PauseState(enum.IntEnum):
    """v1/core/sched/interface.py:24-35."""

    UNPAUSED = 0
    PAUSED_NEW = 1
    PAUSED_ALL = 2


@dataclass
class SamplingParams:
    """The fields of ``vllm.SamplingParams`` the plugin sets, validated as vLLM does (sampling_params.py:660-700)."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    seed: Optional[int] = None
    logprobs: Optional[int] = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    detokenize: bool = True
    n: int = 1

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise FakeValidationError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.temperature < 0:
            raise FakeValidationError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise FakeValidationError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k < -1:
            raise FakeValidationError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")


def TokensPrompt(**fields: Any) -> dict:
    """``vllm.inputs.TokensPrompt`` is a TypedDict (inputs/llm.py:111)."""
    return dict(fields)


@dataclass
class Logprob:
    """logprobs.py:13."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class WeightVersionSpan:
    """outputs.py:42-47."""

    version: str
    start: int
    end: int


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: Optional[list[dict[int, Logprob]]]
    finish_reason: Optional[str] = None
    weight_versions: Optional[list[WeightVersionSpan]] = None


@dataclass
class RequestOutput:
    request_id: str  # the external id (output_processor.py:413)
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    """outputs.py:129-198: prompt tokens served from the prefix cache (output_processor.py:423)."""


@dataclass
class EngineCoreRequest:
    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    external_req_id: Optional[str] = None
    cache_salt: Optional[str] = None  # v1/engine/__init__.py:122


@dataclass
class EngineCoreOutput:
    request_id: str
    new_token_ids: list[int]
    new_logprobs: list[float]
    finish_reason: Optional[str] = None
    error: Optional[str] = None
    """vLLM 0.33: a request rejected on arrival (the only error the fake models: engine_paused)."""
    num_cached_tokens: Optional[int] = None
    """``prefill_stats.num_cached_tokens``: on the request's first output after its prefill."""


class CheckpointState(enum.StrEnum):
    """vLLM 0.34's process checkpoint lifecycle (v1/engine/__init__.py:44-61)."""

    RUNNING = "running"
    PREPARING = "preparing"
    PREPARED = "prepared"
    RESTORING = "restoring"
    FAILED = "failed"

    @property
    def is_restored(self) -> bool:
        return self in (CheckpointState.RUNNING, CheckpointState.RESTORING)


class GracefulHTTPError(RuntimeError):
    """vLLM's ``GracefulHTTPError`` (exceptions.py, 0.29 on): a refusal with its own status."""

    def __init__(self, message: str, http_status: int) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status


class EngineFaultedError(GracefulHTTPError):
    """vLLM 0.34's refusal of new requests while the engine is unhealthy (exceptions.py:203-214)."""

    def __init__(self) -> None:
        super().__init__("The engine is faulted; new requests are not accepted until it recovers", 503)


class RetryableRequestError(RuntimeError):
    """vLLM 0.33's ``RetryableRequestError`` (exceptions.py:139-144): answered as a 503."""

    status_code = 503


class RequestOutputCollector:
    """output_processor.py:53-113: one slot; non-delta outputs replace an unread one."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.output: Any = None
        self.ready = asyncio.Event()

    def put(self, output: Any) -> None:
        self.output = output
        self.ready.set()

    async def get(self) -> Any:
        while (output := self.output) is None:
            await self.ready.wait()
        self.output = None
        self.ready.clear()
        if isinstance(output, Exception):
            raise output
        return output

    def get_nowait(self) -> Any:
        output = self.output
        if output is not None:
            self.output = None
            self.ready.clear()
        if isinstance(output, Exception):
            raise output
        return output


class RequestState:
    """output_processor.py:140-498, for text generation with cumulative or final-only outputs."""

    def __init__(self, request: EngineCoreRequest, queue: RequestOutputCollector) -> None:
        self.request_id = request.request_id
        self.external_req_id = request.external_req_id
        self.output_kind = request.sampling_params.output_kind
        self.want_logprobs = request.sampling_params.logprobs is not None
        self.queue = queue
        self.token_ids: list[int] = []
        self.logprobs: list[dict[int, Logprob]] = []
        self.weight_version_starts: list[tuple[str, int]] = []
        self.num_cached_tokens = 0  # output_processor.py:182
        self.is_prefilling = True

    def track_weight_version(self, version: str) -> None:
        if not self.weight_version_starts or self.weight_version_starts[-1][0] != version:
            self.weight_version_starts.append((version, len(self.token_ids)))

    def spans(self) -> list[WeightVersionSpan]:
        starts = self.weight_version_starts
        ends = [s for _, s in starts[1:]] + [len(self.token_ids)]
        return [WeightVersionSpan(v, s, e) for (v, s), e in zip(starts, ends)]

    def make_request_output(self, new_token_ids: list[int], finish_reason: Optional[str]) -> Optional[RequestOutput]:
        finished = finish_reason is not None
        if self.output_kind == RequestOutputKind.FINAL_ONLY and not finished:
            return None
        delta = self.output_kind == RequestOutputKind.DELTA
        completion = CompletionOutput(
            index=0,
            text=" ".join(map(str, new_token_ids if delta else self.token_ids)),
            token_ids=list(new_token_ids) if delta else list(self.token_ids),
            logprobs=(self.logprobs[-len(new_token_ids):] if delta and new_token_ids else [] if delta else list(self.logprobs))
            if self.want_logprobs
            else None,
            finish_reason=finish_reason,
            weight_versions=self.spans() if finished else None,
        )
        return RequestOutput(request_id=self.external_req_id, outputs=[completion], finished=finished,
                             num_cached_tokens=self.num_cached_tokens)


class OutputProcessor:
    """output_processor.py:504-800: request states by internal id, outputs into collectors."""

    def __init__(self) -> None:
        self.request_states: dict[str, RequestState] = {}
        self.external_req_ids: defaultdict[str, list[str]] = defaultdict(list)

    def add_request(self, request: EngineCoreRequest, queue: RequestOutputCollector) -> None:
        state = RequestState(request, queue)
        self.request_states[request.request_id] = state
        self.external_req_ids[state.external_req_id].append(request.request_id)

    def abort_requests(self, request_ids: Iterable[str], internal: bool) -> list[str]:
        """output_processor.py:552-614 (without parallel-sampling parents)."""
        internal_req_ids: list[str] = []
        for request_id in request_ids:
            if internal:
                internal_req_ids.append(request_id)
                if req_state := self.request_states.get(request_id):
                    internal_ids = self.external_req_ids[req_state.external_req_id]
                    internal_ids.remove(request_id)
                    if not internal_ids:
                        del self.external_req_ids[req_state.external_req_id]
            elif internal_ids := self.external_req_ids.pop(request_id, []):
                internal_req_ids.extend(internal_ids)
        aborted = []
        for request_id in internal_req_ids:
            req_state = self.request_states.pop(request_id, None)
            if req_state is not None:
                aborted.append(request_id)
                if output := req_state.make_request_output([], "abort"):
                    req_state.queue.put(output)
        return aborted

    def _forget(self, request_id: str, state: Any) -> None:
        """Drop a finished or rejected request's state and its external-id mapping."""
        self.request_states.pop(request_id, None)
        ids = self.external_req_ids.get(state.external_req_id)
        if ids and request_id in ids:
            ids.remove(request_id)
            if not ids:
                del self.external_req_ids[state.external_req_id]

    def process_outputs(self, outputs: list[EngineCoreOutput], weight_version: Optional[str]) -> None:
        """output_processor.py:681-800: outputs for unknown (already aborted) ids are ignored."""
        for out in outputs:
            state = self.request_states.get(out.request_id)
            if state is None:
                continue
            if out.error is not None:
                # 0.33, output_processor.py:764-771: rejected on arrival, nothing was run.
                state.queue.put(RetryableRequestError(out.error))
                self._forget(out.request_id, state)
                continue
            if state.is_prefilling:  # output_processor.py:733-743
                if out.num_cached_tokens is not None:
                    state.num_cached_tokens = out.num_cached_tokens
                state.is_prefilling = False
            if out.new_token_ids and weight_version is not None:
                state.track_weight_version(weight_version)
            state.token_ids.extend(out.new_token_ids)
            if state.want_logprobs:
                state.logprobs.extend({t: Logprob(lp, rank=1)} for t, lp in zip(out.new_token_ids, out.new_logprobs))
            if output := state.make_request_output(out.new_token_ids, out.finish_reason):
                state.queue.put(output)
            if out.finish_reason is not None:
                self._forget(out.request_id, state)


@dataclass
class _CoreRequest:
    request: EngineCoreRequest
    rng: random.Random
    num_output: int = 0
    block_hashes: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0


# The fake's KV block size in tokens (vLLM's CPU backend has 128; any full block behaves alike).
BLOCK_SIZE = 16


def request_block_hashes(request: EngineCoreRequest, block_size: int = BLOCK_SIZE) -> list[int]:
    """``request_block_hasher`` (v1/core/kv_cache_utils.py:941-1000): one hash per full block of
    the prompt, each chained to its parent's (``hash_block_tokens``, 695-726), the request's
    ``cache_salt`` among the first block's extra keys only (647-651), so that a salt changes
    every block's hash. Python's ``hash`` stands for vLLM's sha256 of the same tuple."""
    ids, hashes, parent = request.prompt_token_ids, [], None
    for start in range(0, len(ids) - block_size + 1, block_size):
        extra_keys = (("cache_salt", request.cache_salt),) if start == 0 and request.cache_salt else None
        parent = hash((parent, tuple(ids[start : start + block_size]), extra_keys))
        hashes.append(parent)
    return hashes


class KVCacheManager:
    """The prefix-caching part of v1/core/kv_cache_manager.py and its block pool: the hashes of
    cached full blocks, at most *num_blocks*, the least recently used evicted first (the free
    block queue, kv_cache_utils.py:246-260), and the ``PrefixCacheStats`` counts in tokens."""

    def __init__(self, num_blocks: int = 4096, block_size: int = BLOCK_SIZE) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.cached: OrderedDict[int, None] = OrderedDict()
        self.queries = 0  # metrics/stats.py:138-155: prompt tokens looked up
        self.hits = 0  # and the tokens of them found cached

    def get_computed_blocks(self, core_request: _CoreRequest) -> int:
        """kv_cache_manager.py:264-300 and ``find_longest_cache_hit`` (single_type_kv_cache_manager.py:
        782-790): the cached tokens, the longest run of cached blocks from the start, of at most
        ``num_tokens - 1`` tokens (the last one is recomputed for its logits)."""
        max_blocks = (len(core_request.request.prompt_token_ids) - 1) // self.block_size
        hit = 0
        for block_hash in core_request.block_hashes[:max_blocks]:
            if block_hash not in self.cached:
                break  # chained hashes: every later block misses too
            self.cached.move_to_end(block_hash)
            hit += 1
        return hit * self.block_size

    def record_prefix_cache_stats(self, core_request: _CoreRequest, num_hits: int) -> None:
        """kv_cache_manager.py:253-262, at admission (scheduler.py:1314-1318)."""
        self.queries += len(core_request.request.prompt_token_ids)
        self.hits += num_hits

    def cache_blocks(self, core_request: _CoreRequest) -> None:
        """``allocate_slots`` caching the computed full blocks (kv_cache_manager.py:616): the
        request's full blocks, all computed in the fake's one prefill step, become cached."""
        for block_hash in core_request.block_hashes:
            self.cached[block_hash] = None
            self.cached.move_to_end(block_hash)
        while len(self.cached) > self.num_blocks:
            self.cached.popitem(last=False)


class Scheduler:
    """The parts of v1/core/sched/scheduler.py the plugin observes."""

    def __init__(self, max_num_seqs: int) -> None:
        self.max_num_seqs = max_num_seqs
        self.requests: dict[str, _CoreRequest] = {}
        self.waiting: deque[_CoreRequest] = deque()
        self.running: list[_CoreRequest] = []
        self.pause_state = PauseState.UNPAUSED
        self.kv_cache_manager = KVCacheManager()

    def get_request_counts(self) -> tuple[int, int]:
        """scheduler.py:2608-2610."""
        return len(self.running), len(self.waiting)

    def add(self, request: EngineCoreRequest) -> None:
        seed = request.sampling_params.seed
        rng = random.Random(seed if seed is not None else zlib.crc32(request.request_id.encode()))
        # v1/request.py:225-230: the block hashes are computed when the core builds its Request.
        core_request = _CoreRequest(request, rng, block_hashes=request_block_hashes(request))
        self.requests[request.request_id] = core_request
        self.waiting.append(core_request)

    def finish_requests(self, request_ids: Optional[Iterable[str]]) -> list[str]:
        """scheduler.py:2649-: None finishes every request; returns the ones that were live."""
        ids = list(self.requests) if request_ids is None else [i for i in request_ids if i in self.requests]
        for request_id in ids:
            core_request = self.requests.pop(request_id)
            if core_request in self.running:
                self.running.remove(core_request)
            else:
                self.waiting.remove(core_request)
        return ids

    def schedule(self) -> list[_CoreRequest]:
        """Admit waiting requests only when unpaused (917); run nothing when PAUSED_ALL (615-617)."""
        if self.pause_state == PauseState.PAUSED_ALL:
            return []
        while self.pause_state == PauseState.UNPAUSED and self.waiting and len(self.running) < self.max_num_seqs:
            core_request = self.waiting.popleft()
            # scheduler.py:566, 1256, 1314-1318: look up its cached prefix, allocate (caching its
            # full blocks), record the lookup.
            core_request.num_cached_tokens = self.kv_cache_manager.get_computed_blocks(core_request)
            self.kv_cache_manager.cache_blocks(core_request)
            self.kv_cache_manager.record_prefix_cache_stats(core_request, core_request.num_cached_tokens)
            self.running.append(core_request)
        return list(self.running)


class EngineCore:
    """The engine-core process (v1/engine/core.py), as a task reading an ordered input queue."""

    def __init__(self, step_s: float, vocab_size: int, max_num_seqs: int, pause_rejects_new: bool = False,
                 stamp_versions: bool = True, checkpoints: bool = False) -> None:
        self.step_s = step_s
        # 0.34 (core.py:1194): None where the release has no process checkpoint.
        self._checkpoint_state: Optional[CheckpointState] = CheckpointState.RUNNING if checkpoints else None
        self.stamp_versions = stamp_versions
        self.pause_rejects_new = pause_rejects_new
        self.reject_new_requests = False  # 0.33: core.py:1194, 2232-2236
        self.vocab_size = vocab_size
        self.scheduler = Scheduler(max_num_seqs)
        self._weight_version = "default"  # core.py:141
        # Per front end (API server process): its output queue; per request: its front end
        # (EngineCoreRequest.client_index, core.py routes outputs by it).
        self.outputs: dict[int, asyncio.Queue] = {}
        self._client_of: dict[str, int] = {}
        self.inputs: asyncio.Queue = asyncio.Queue()
        self._task: Optional[asyncio.Task] = None
        self._drains: list[asyncio.Future] = []  # wait-mode pauses until nothing runs
        # Not vLLM's: how often each utility was called, from every front end together (the
        # tests check that a pause or a bump over several front ends reaches the core once).
        self.utility_calls: collections.Counter[str] = collections.Counter()

    def connect(self, client_index: int) -> asyncio.Queue:
        """A front end's output queue; the core loop starts with the first front end."""
        queue = self.outputs.setdefault(client_index, asyncio.Queue())
        if self._task is None:
            self._task = end_server_if_it_dies(asyncio.get_running_loop().create_task(self._run()))
        return queue

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        """The busy loop (core.py:1567-1625): inputs first, then one step if anything runs."""
        while True:
            while not self.inputs.empty():
                self._process(*self.inputs.get_nowait())
            if self.scheduler.requests and self.scheduler.schedule():
                await asyncio.sleep(self.step_s)
                while not self.inputs.empty():  # inputs that arrived during the step come first
                    self._process(*self.inputs.get_nowait())
                self.step()
            else:
                self._process(*await self.inputs.get())

    def _process(self, kind: str, payload: Any, future: Optional[asyncio.Future], client_index: int = 0) -> None:
        try:
            result = self.handle(kind, payload, client_index)
        except Exception as exc:
            if future is not None:
                answer(future, error=exc)
            return
        if future is None:
            return
        if isinstance(result, asyncio.Future):
            # A utility that completes later (a wait-mode pause): answer when it does.
            result.add_done_callback(lambda done: answer(future))
            return
        answer(future, result)

    def _notify_idle(self) -> None:
        """core.py:1578, 1621-1624: complete the wait-mode pauses once nothing runs."""
        if self._drains and not self.scheduler.running:
            for drained in self._drains:
                if not drained.done():
                    drained.set_result(None)
            self._drains.clear()

    # utility methods, called by name (core.py:1687-1698)
    def set_weight_version(self, weight_version: str) -> None:
        self._weight_version = weight_version

    def get_weight_version(self) -> str:
        return self._weight_version

    def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> Optional[asyncio.Future]:
        """core.py:2061-2103. ``wait``: PAUSED_NEW (queued requests stay queued, running ones step
        on); the returned future completes once nothing runs (the idle-state callback)."""
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"Invalid pause mode: {mode}")
        if mode == "wait":
            self.scheduler.pause_state = PauseState.PAUSED_NEW
            if not self.scheduler.running:
                return None
            drained = asyncio.get_running_loop().create_future()
            self._drains.append(drained)
            return drained
        if mode == "abort":
            aborted = self.scheduler.finish_requests(None)
            self._send([EngineCoreOutput(i, [], [], "abort") for i in aborted])
        if mode == "keep" and clear_cache:
            # core.py:914-919: _reset_caches(reset_running_requests=True); the preempted requests'
            # recompute is not modelled, their prefix-cache blocks are dropped.
            self.scheduler.kv_cache_manager.cached.clear()
        self.scheduler.pause_state = PauseState.PAUSED_ALL if mode == "keep" else PauseState.PAUSED_NEW
        self.reject_new_requests = self.pause_rejects_new and mode != "keep"

    def resume_scheduler(self) -> None:
        state = self._checkpoint_state
        if state is not None:  # 0.34, core.py:1063-1073 and 2466-2469
            if not state.is_restored:
                raise RuntimeError(f"Cannot resume scheduling while the checkpoint state is {state}")
            self._checkpoint_state = CheckpointState.RUNNING
        self.scheduler.pause_state = PauseState.UNPAUSED
        self.reject_new_requests = False

    def checkpoint_state(self) -> tuple[CheckpointState, Optional[str]]:
        """core.py:1194 (0.34)."""
        return self._checkpoint_state, None

    def checkpoint_prepare(self, mode: str = "wait") -> Optional[str]:
        """core.py:2471-2496 (0.34): why it cannot prepare, or None; PREPARED once drained."""
        state = self._checkpoint_state
        if state in (CheckpointState.PREPARING, CheckpointState.PREPARED):
            return None
        if state != CheckpointState.RUNNING:
            return f"Cannot prepare while the checkpoint state is {state}"
        self._checkpoint_state = CheckpointState.PREPARING
        drained = self.pause_scheduler(mode, clear_cache=False)
        self.reject_new_requests = mode != "keep"  # EngineCoreProc.pause_generation, 2456-2464

        def prepared(_: Any = None) -> None:  # _finish_pause, 997-1016
            if self._checkpoint_state == CheckpointState.PREPARING:
                self._checkpoint_state = CheckpointState.PREPARED

        if drained is None:
            prepared()
        else:
            drained.add_done_callback(prepared)
        return None

    def checkpoint_restore(self) -> None:
        """core.py:2498-2513 (0.34)."""
        state = self._checkpoint_state
        if state.is_restored:
            return
        if state != CheckpointState.PREPARED:
            raise RuntimeError(f"Cannot restore while the checkpoint state is {state}")
        self._checkpoint_state = CheckpointState.RESTORING
        self.wake_up(["kv_cache"])

    def is_scheduler_paused(self) -> bool:
        return self.scheduler.pause_state != PauseState.UNPAUSED

    def sleep(self, level: int = 1, mode: str = "abort") -> Optional[asyncio.Future]:
        """core.py:959-990 at level 0 (no memory to release on the fake): the pause alone."""
        return self.pause_scheduler(mode=mode, clear_cache=level >= 1)

    def wake_up(self, tags: Optional[list[str]] = None) -> bool:
        """core.py:997-1018: fully awake (always, on the fake), the scheduler resumes."""
        self.resume_scheduler()
        return True

    def finish_weight_update(self) -> None:
        """The workers' finish_weight_update (gpu_worker.py:1587), which the fake has no weights for."""

    def _send(self, outputs: list[EngineCoreOutput]) -> None:
        """Each output to its request's front end; a finished request is forgotten."""
        version = self._weight_version if self.stamp_versions else None
        by_client: dict[int, list[EngineCoreOutput]] = {}
        for out in outputs:
            client = self._client_of.get(out.request_id, 0)
            if out.finish_reason is not None:
                self._client_of.pop(out.request_id, None)
            by_client.setdefault(client, []).append(out)
        for client, outs in by_client.items():
            self.outputs[client].put_nowait((outs, version))

    def handle(self, kind: str, payload: Any, client_index: int = 0) -> Any:
        if kind == "ADD":
            self._client_of[payload.request_id] = client_index
            if self.reject_new_requests:
                # 0.33, core.py:1796-1815: "Generation is paused. Please retry after it resumes."
                self._send([EngineCoreOutput(payload.request_id, [], [], "error", "Generation is paused. Please retry after it resumes.")])
                return None
            self.scheduler.add(payload)
        elif kind == "ABORT":
            for request_id in self.scheduler.finish_requests(payload):
                self._client_of.pop(request_id, None)
            self._notify_idle()
        elif kind == "UTILITY":
            method, args = payload
            self.utility_calls[method] += 1
            return getattr(self, method)(*args)

    def step(self) -> None:
        outputs = []
        for core_request in self.scheduler.schedule():
            params = core_request.request.sampling_params
            token = core_request.rng.randrange(EOS_TOKEN_ID + 1, self.vocab_size)
            core_request.num_output += 1
            finish = None
            if token in params.stop_token_ids:
                finish = "stop"
            elif core_request.num_output >= params.max_tokens:
                finish = "length"
            # The fake prefills and samples the first token in one step: its output has the prefill stats.
            cached = core_request.num_cached_tokens if core_request.num_output == 1 else None
            outputs.append(EngineCoreOutput(core_request.request.request_id, [token], [-5.0 * core_request.rng.random()], finish,
                                            num_cached_tokens=cached))
            if finish:
                self.scheduler.finish_requests([core_request.request.request_id])
        self._send(outputs)
        self._notify_idle()


class EngineCoreClient:
    """``AsyncMPClient`` (core_client.py:1106-1365): one ordered input queue into the core,
    shared by every front end (API server process) of the server."""

    def __init__(self, core: EngineCore, client_index: int = 0) -> None:
        self.core = core
        self.client_index = client_index
        self._inputs = core.inputs

    def start(self) -> asyncio.Queue:
        """Connect to the engine core; returns this front end's output queue."""
        return self.core.connect(self.client_index)

    async def stop(self) -> None:
        self.core.stop()

    async def add_request_async(self, request: EngineCoreRequest) -> None:
        await asyncio.sleep(0)  # the real send may suspend (zmq.asyncio)
        self._inputs.put_nowait(("ADD", request, None, self.client_index))

    async def abort_requests_async(self, request_ids: list[str]) -> None:
        if request_ids:
            self._inputs.put_nowait(("ABORT", list(request_ids), None, self.client_index))

    async def call_utility_async(self, method: str, *args: Any) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._inputs.put_nowait(("UTILITY", (method, args), future, self.client_index))
        return await future

    async def call_utility_all_async(self, method: str, *args: Any) -> list[Any]:
        return [await self.call_utility_async(method, *args)]

    # One engine core (one data-parallel rank), as core_client.py:723 names it.
    core_engines = [(0).to_bytes(2, "little")]

    async def _call_utility_async(self, method: str, *args: Any, engine: bytes) -> Any:
        assert engine in self.core_engines
        return await self.call_utility_async(method, *args)


class Renderer:
    """``renderer.render_cmpl_async`` for token prompts (renderers/base.py:1260-1285)."""

    def __init__(self, max_model_len: int) -> None:
        self.max_model_len = max_model_len

    async def render_cmpl_async(self, prompts: list[dict]) -> list[dict]:
        rendered = []
        for prompt in prompts:
            ids = list(prompt["prompt_token_ids"])
            if len(ids) >= self.max_model_len:
                raise FakeValidationError(f"The prompt ({len(ids)} tokens) is longer than the maximum model length of {self.max_model_len}.")
            rendered.append({"type": "token", "prompt_token_ids": ids})
            if cache_salt := prompt.get("cache_salt"):  # renderers/base.py:962-963
                rendered[-1]["cache_salt"] = cache_salt
        return rendered


class ModelConfig:
    """The two parts of vLLM's ``ModelConfig`` the plugin reads (config/model.py)."""

    def __init__(self, vocab_size: int, max_model_len: int) -> None:
        self._vocab_size = vocab_size
        self.max_model_len = max_model_len

    def get_vocab_size(self) -> int:
        return self._vocab_size


class AsyncLLM:
    """The fake ``AsyncLLM``: the same public surface and internals the plugin uses."""

    def __init__(self, step_s: float = 0.003, vocab_size: int = 512, max_num_seqs: int = 64, max_model_len: int = 2048,
                 pause_rejects_new: bool = False, stamp_versions: bool = True, core: Optional[EngineCore] = None,
                 client_index: int = 0, checkpoints: bool = False) -> None:
        """*core*: the engine core of another front end to share (several API server
        processes); *client_index*: this front end's place among them; *checkpoints*: vLLM 0.34's
        process checkpoint and ``EngineFaultedError``."""
        self.errored = False
        self.faulted = False
        """0.34: the engine is unhealthy; ``generate`` raises ``EngineFaultedError`` (set by the fake server)."""
        self.pause_rejects_new = pause_rejects_new
        self.output_processor = OutputProcessor()
        core = core or EngineCore(step_s, vocab_size, max_num_seqs, pause_rejects_new, stamp_versions, checkpoints)
        self.engine_core = EngineCoreClient(core, client_index)
        self.renderer = Renderer(max_model_len)
        self.model_config = ModelConfig(vocab_size, max_model_len)
        self._output_handler: Optional[asyncio.Task] = None

    def start(self) -> None:
        """Start the engine core and the output handler (async_llm.py:825-909) on this loop."""
        self._outputs = self.engine_core.start()
        self._output_handler = end_server_if_it_dies(asyncio.get_running_loop().create_task(self._handle_outputs()))

    async def shutdown(self) -> None:
        await self.engine_core.stop()
        if self._output_handler is not None:
            self._output_handler.cancel()

    async def _handle_outputs(self) -> None:
        while True:
            outputs, version = await self._outputs.get()
            self.output_processor.process_outputs(outputs, version)

    async def add_request(self, request_id: str, prompt: Any, params: SamplingParams) -> RequestOutputCollector:
        """async_llm.py:388-556 for one sequence: process inputs, assign the internal id, add."""
        await asyncio.sleep(0)  # processing inputs yields to the loop
        cache_salt = prompt.get("cache_salt") if isinstance(prompt, dict) else None  # input_processor.py:548
        text = prompt.get("prompt") if isinstance(prompt, dict) else prompt  # a TextPrompt, or the text
        if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            ids = list(prompt["prompt_token_ids"])
        elif isinstance(text, str):
            ids = [EOS_TOKEN_ID + 1 + b % 200 for b in text.encode()] or [1]
        else:
            raise FakeValidationError(f"unsupported prompt {type(prompt).__name__}")
        request = EngineCoreRequest(request_id=request_id, prompt_token_ids=ids, sampling_params=params, cache_salt=cache_salt)
        request.external_req_id = request.request_id  # input_processor.py:363
        request.request_id = f"{request.external_req_id}-{uuid.uuid4().hex[:8]}"  # 371
        queue = RequestOutputCollector(request.request_id)
        self.output_processor.add_request(request, queue)  # async_llm.py:572
        await self.engine_core.add_request_async(request)  # 575
        return queue

    async def generate(self, prompt: Any, sampling_params: SamplingParams, request_id: str, **kwargs: Any) -> AsyncGenerator[RequestOutput, None]:
        """async_llm.py:743-823."""
        q: Optional[RequestOutputCollector] = None
        if self.faulted:
            raise EngineFaultedError()  # check_admission, before the request is added
        try:
            q = await self.add_request(request_id, prompt, sampling_params)
            finished = False
            while not finished:
                out = q.get_nowait() or await q.get()
                finished = out.finished
                answer = ABORTED_ANSWER.get()
                if finished and answer is not None and any(o.finish_reason == "abort" for o in out.outputs):
                    answer["aborted"] = True
                yield out
        except (asyncio.CancelledError, GeneratorExit):
            if q is not None:
                await self.abort(q.request_id, internal=True)
            raise
        except RetryableRequestError:
            if q is not None:  # 0.33, async_llm.py:820-827
                await self.abort(q.request_id, internal=True)
            raise

    async def abort(self, request_id: str | Iterable[str], internal: bool = False) -> None:
        """async_llm.py:911-922: the list of aborted ids is not returned."""
        request_ids = [request_id] if isinstance(request_id, str) else list(request_id)
        all_request_ids = self.output_processor.abort_requests(request_ids, internal)
        await self.engine_core.abort_requests_async(all_request_ids)

    async def pause_generation(self, *, mode: str = "abort", clear_cache: bool = True) -> None:
        """async_llm.py:952-984."""
        await self.engine_core.call_utility_async("pause_scheduler", mode, clear_cache)
        await asyncio.sleep(0.02)

    async def resume_generation(self) -> None:
        await self.engine_core.call_utility_async("resume_scheduler")
        # Not vLLM's: the engine has resumed but the caller has not heard yet. This opens, every
        # time, the window in which a pause that races the resume lands on the engine first.
        await asyncio.sleep(RESUME_ANSWER_DELAY_S)

    async def is_paused(self) -> bool:
        return await self.engine_core.call_utility_async("is_scheduler_paused")

    async def update_weight_version(self, new_version: str) -> None:
        await self.engine_core.call_utility_async("set_weight_version", new_version)

    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        """async_llm.py:1154-1160."""
        await self.engine_core.call_utility_async("sleep", level, mode)

    async def wake_up(self, tags: Optional[list[str]] = None) -> bool:
        """async_llm.py:1169-1175 (one engine core)."""
        return await self.engine_core.call_utility_async("wake_up", tags)

    async def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        """async_llm.py:1351-1355: the version is set after the workers' finish, through
        ``self.update_weight_version``."""
        await self.engine_core.call_utility_async("finish_weight_update")
        if weight_version is not None:
            await self.update_weight_version(weight_version)

    async def get_weight_version(self) -> str:
        return await self.engine_core.call_utility_async("get_weight_version")

    # 0.34: async_llm.py:1237-1248
    async def checkpoint_prepare(self, mode: str = "wait") -> Optional[str]:
        return await self.engine_core.call_utility_async("checkpoint_prepare", mode)

    async def checkpoint_restore(self) -> None:
        await self.engine_core.call_utility_async("checkpoint_restore")

    async def checkpoint_state(self) -> tuple[CheckpointState, Optional[str]]:
        return await self.engine_core.call_utility_async("checkpoint_state")


class FakeNotFoundError(Exception):
    """Stands for vLLM 0.26's ``VLLMNotFoundError`` (exceptions.py:39), not yet a ``VLLMClientError``."""


class _Absent:
    """A method the release lacks: reading it raises AttributeError, as on that release's class.
    A non-data descriptor, so an instance attribute of the same name (the plugin's) still wins."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        raise AttributeError(f"'{(owner or type(obj)).__name__}' object has no attribute '{self.name}'")


class AsyncLLM026(AsyncLLM):
    """vLLM 0.26.0's ``AsyncLLM``: 0.31's (``stamp_versions=False``, no ``call_utility_all_async``
    in the plugin's use) without a weight version (no ``update_weight_version`` or
    ``get_weight_version``: the engine core keeps none before 0.27), and a
    ``finish_weight_update`` without ``weight_version`` (v1/engine/async_llm.py:1093-1100)."""

    update_weight_version = _Absent()
    get_weight_version = _Absent()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(stamp_versions=False, **kwargs)

    async def finish_weight_update(self) -> None:  # type: ignore[override]
        await self.engine_core.call_utility_async("finish_weight_update")
