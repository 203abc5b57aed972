"""The scheduler side: a task that receives messages in order (as over SGLang's ZMQ socket)
and sends outputs back to the TokenizerManager's handle loop.

Follows ``managers/scheduler.py`` (0.5.23): ``event_loop_normal`` (2026-2055),
``abort_request`` (5675-5813), ``pause_generation`` / ``continue_generation`` (5817-5954),
``record_weight_version_change`` (5636-5656), and ``scheduler_components/output_streamer.py``;
its prefix cache follows ``mem_cache/radix_cache.py`` (:class:`FakeRadixCache`).
"""

from __future__ import annotations

import asyncio
import bisect
import random
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .. import answer
from .io_struct import AbortReq, ContinueGenerationReqInput, PauseGenerationReqInput, TokenizedGenerateReqInput

# SGLANG_FORCE_STREAM_INTERVAL (environ.py:688): a non-stream request sends output every 50 tokens.
FORCE_STREAM_INTERVAL = 50
EOS_TOKEN_ID = 2


def finish_abort() -> dict:
    """``FINISH_ABORT().to_json()`` (schedule_batch.py:332-345)."""
    return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}


@dataclass
class Req:
    """A request inside the scheduler."""

    rid: str
    input_ids: list[int]
    sampling: dict
    stream: bool
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    send_offset: int = 0
    to_finish: Optional[dict] = None
    finished_reason: Optional[dict] = None
    version_events: list[tuple[str, int]] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.Random)
    extra_key: Optional[str] = None
    cache_salt: Optional[str] = None
    cached_tokens: Optional[int] = None
    """Prompt tokens matched in the radix cache; None until the request is first admitted
    (schedule_batch.py:2965-2974 counts them once, a retracted request keeps its count)."""


@dataclass
class WeightVersionChange:
    """The communicator call of ``update_weight_version``; ``done`` is the reply."""

    new_version: str
    done: asyncio.Future


@dataclass
class WeightsCall:
    """A weight-update communicator call (``update_weights_from_disk`` or ``_tensor``, or a
    session's begin or end); ``done`` is the reply, ``(success, message)``."""

    kind: str
    obj: Any
    done: asyncio.Future


@dataclass
class BatchOut:
    """One request's output in a batch (``BatchTokenIDOutput`` item)."""

    rid: str
    new_ids: list[int]
    new_logprobs: list[float]
    finished_reason: Optional[dict]
    completion_tokens: int
    weight_versions: Optional[list[dict]]
    cached_tokens: int = 0
    """``BatchTokenIDOutput.cached_tokens``: the TokenizerManager's ``meta_info["cached_tokens"]``."""


def compute_spans(events: list[tuple[str, int]], current: str, n: int) -> list[dict]:
    """``utils/weight_versions.py:compute_weight_version_spans``."""
    spans: list[dict] = []
    for version, end in [*events, (current, n)]:
        end = min(end, n)
        if spans and end <= spans[-1]["end"]:
            continue
        if spans and version == spans[-1]["version"]:
            spans[-1]["end"] = end
            continue
        spans.append({"version": version, "start": spans[-1]["end"] if spans else 0, "end": end})
    return spans


def _common_prefix_len(a: tuple, b: tuple) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class FakeRadixCache:
    """SGLang's radix cache (``mem_cache/radix_cache.py``), page size 1, kept as whole prompts.

    Keys are namespaced by ``(extra_key, cache_salt)`` (``RadixKey.child_key_at``, 226-247):
    prompts in different namespaces share nothing. ``match_prefix`` (364-412) is the longest
    common prefix with any prompt of the namespace, ``insert`` adds a prompt. Unlike SGLang the
    fake inserts the prompt alone (SGLang also caches the output tokens of a finished request)
    and keeps at most *max_prompts*, evicting the least recently matched or inserted first
    (``--radix-eviction-policy``'s default, ``lru``: arg_groups/fields/memory.py:25-42).
    """

    def __init__(self, max_prompts: int = 1000) -> None:
        self.max_prompts = max_prompts
        self._lru: OrderedDict[tuple, None] = OrderedDict()  # (namespace, prompt), oldest first
        # Per namespace its prompts sorted: the longest common prefix with any of them is the one
        # with a sorted neighbour of the query, so a match costs two comparisons, not one per prompt.
        self._sorted: dict[tuple, list[tuple]] = {}

    def match_prefix(self, input_ids: list[int], extra_key: Optional[str] = None, cache_salt: Optional[str] = None) -> int:
        """The number of leading tokens of *input_ids* cached in the namespace."""
        namespace, key = (extra_key, cache_salt), tuple(input_ids)
        prompts = self._sorted.get(namespace, [])
        at = bisect.bisect_left(prompts, key)
        best, best_len = None, 0
        for neighbour in prompts[max(at - 1, 0) : at + 1]:
            n = _common_prefix_len(neighbour, key)
            if n > best_len:
                best, best_len = neighbour, n
        if best is not None:
            self._lru.move_to_end((namespace, best))  # match_prefix refreshes access times
        return best_len

    def insert(self, input_ids: list[int], extra_key: Optional[str] = None, cache_salt: Optional[str] = None) -> None:
        """Cache *input_ids* in the namespace, evicting the least recently used beyond the bound."""
        entry = ((extra_key, cache_salt), tuple(input_ids))
        if entry in self._lru:
            self._lru.move_to_end(entry)
            return
        self._lru[entry] = None
        bisect.insort(self._sorted.setdefault(entry[0], []), entry[1])
        while len(self._lru) > self.max_prompts:
            (namespace, prompt), _ = self._lru.popitem(last=False)
            prompts = self._sorted[namespace]
            del prompts[bisect.bisect_left(prompts, prompt)]
            if not prompts:
                del self._sorted[namespace]


class FakeScheduler:
    """Decodes one pseudo-random token per running request every ``step_s`` seconds."""

    def __init__(self, send: Callable[[Any], None], step_s: float, deterministic: bool, vocab_size: int = 512) -> None:
        self.send = send
        self.step_s = step_s
        self.deterministic = deterministic
        self.vocab_size = vocab_size
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.waiting_queue: list[Req] = []
        self.running: list[Req] = []
        self.paused = False
        self.weight_version = "default"
        self.keeps_weight_version = True
        """Whether the scheduler keeps a weight version and labels each request's tokens with it
        (0.5.19 on); before, it never hears of one."""
        self.tree_cache = FakeRadixCache()
        self.weights = "initial"
        """The weights loaded (the fake loads none: a checkpoint's path, or ``tensors``)."""
        self.weight_session = False
        self.flushes = 0
        # The load snapshot (load_inquirer.py:109-140), written only while the loop runs.
        self.snapshot = (0, 0)

    async def run(self) -> None:
        """``event_loop_normal``: ingest, skip everything else while paused, run a batch."""
        while True:
            if (self.paused or not (self.running or self.waiting_queue)) and self.inbox.empty():
                self.snapshot = (len(self.running), len(self.waiting_queue)) if not self.paused else self.snapshot
                self.handle(await self.inbox.get())
            while not self.inbox.empty():
                self.handle(self.inbox.get_nowait())
            if self.paused:
                continue  # scheduler.py:2034-2036: no forward pass, no snapshot update
            for req in self.waiting_queue:
                self.match_prefix(req)
            self.running.extend(self.waiting_queue)
            self.waiting_queue.clear()
            self.snapshot = (len(self.running), 0)
            if self.running:
                await asyncio.sleep(self.step_s)
                self.decode_step()

    def handle(self, msg: Any) -> None:
        """Dispatch one message from the TokenizerManager."""
        if isinstance(msg, TokenizedGenerateReqInput):
            seed = msg.sampling_params.get("sampling_seed")
            if not self.deterministic or seed is None:
                seed = zlib.crc32(msg.rid.encode())  # random per request: seeds are ignored
            self.waiting_queue.append(Req(msg.rid, msg.input_ids, msg.sampling_params, msg.stream, rng=random.Random(seed),
                                          extra_key=msg.extra_key, cache_salt=msg.cache_salt))
        elif isinstance(msg, AbortReq):
            self.abort_request(msg)
        elif isinstance(msg, PauseGenerationReqInput):
            self.pause_generation(msg)
        elif isinstance(msg, ContinueGenerationReqInput):
            self.paused = False
        elif isinstance(msg, WeightVersionChange):
            self.record_weight_version_change(msg.new_version)
            answer(msg.done)
        elif isinstance(msg, WeightsCall):
            answer(msg.done, self.weights_call(msg.kind, msg.obj))

    def match_prefix(self, req: Req) -> None:
        """A request entering a prefill batch (``Req.init_next_round_input``, schedule_batch.py:
        1692-1745): its cached prefix, at most the prompt but one token (``_compute_max_prefix_len``,
        1766-1785: the last is recomputed for its logits), counted once; then its prompt is cached."""
        if req.cached_tokens is not None:
            return
        matched = self.tree_cache.match_prefix(req.input_ids, req.extra_key, req.cache_salt)
        req.cached_tokens = max(min(matched, len(req.input_ids) - 1), 0)
        self.tree_cache.insert(req.input_ids, req.extra_key, req.cache_salt)

    def abort_request(self, recv: AbortReq) -> None:
        """Prefix match (5688, 5800): queued requests answer at once, running ones next step."""
        matches = lambda req: recv.abort_all or req.rid.startswith(recv.rid)
        for req in [r for r in self.waiting_queue if matches(r)]:
            self.waiting_queue.remove(req)
            # _make_abort_req (6398-6409): the echo carries the request's spans.
            spans = compute_spans(req.version_events, self.weight_version, len(req.output_ids)) if self.keeps_weight_version else None
            self.send(AbortReq(rid=req.rid, finished_reason=recv.finished_reason, weight_versions=spans))
        for req in self.running:
            if req.finished_reason is None and matches(req):
                req.to_finish = finish_abort()
        # A rid the scheduler has never seen matches nothing: that abort is lost.

    def pause_generation(self, recv: PauseGenerationReqInput) -> None:
        """``in_place`` freezes everything; ``retract`` moves running requests back to waiting."""
        self.paused = True
        if recv.mode == "retract":
            retracted = [r for r in self.running if r.finished_reason is None]
            self.running = []
            self.waiting_queue.extend(retracted)  # _add_request_to_queue; output_ids are kept

    def weights_call(self, kind: str, obj: Any) -> tuple[bool, str]:
        """``scheduler_components/weight_updater.py`` (0.5.23): the session (309-335), the tensor
        update's check for it (232-239), the load, the version recorded (153), then the flush,
        whose refusal fails the call (120-133)."""
        if kind in ("begin", "end"):
            if (kind == "begin") == self.weight_session:
                return False, f"{kind}_weight_update: a session is {'already' if self.weight_session else 'not'} open"
            self.weight_session = kind == "begin"
            return True, "ok"
        if kind == "tensor" and not self.weight_session:
            return False, "update_weights_from_tensor must run between begin_weight_update() and end_weight_update()"
        self.weights = obj.model_path if kind == "disk" else "tensors"
        if obj.weight_version is not None and self.keeps_weight_version:
            self.record_weight_version_change(obj.weight_version)
        if obj.flush_cache and not self.flush_cache():
            return False, ("Weights were updated, but the cache was not flushed because requests are still running or "
                           "queued. Retract or finish them, then call /flush_cache.")
        return True, "Succeeded to update model weights."

    def flush_cache(self) -> bool:
        """``Scheduler.flush_cache`` (5518-5549): refused while requests run (frozen in place
        too), or wait unpaused; else the radix cache is emptied."""
        if self.running or (self.waiting_queue and not self.paused):
            return False
        self.tree_cache = FakeRadixCache()
        self.flushes += 1
        return True

    def record_weight_version_change(self, new_version: str) -> None:
        """Record an event only on live requests that already have output tokens."""
        if new_version == self.weight_version:
            return
        for req in [*self.running, *self.waiting_queue]:
            if req.output_ids:
                req.version_events.append((self.weight_version, len(req.output_ids)))
        self.weight_version = new_version

    def decode_step(self) -> None:
        """One token for every running request; outputs as ``output_streamer.py`` sends them."""
        for req in list(self.running):
            if req.to_finish is not None:
                req.finished_reason = req.to_finish
            else:
                token = req.rng.randrange(EOS_TOKEN_ID, self.vocab_size)
                req.output_ids.append(token)
                req.logprobs.append(-5.0 * req.rng.random())
                max_new = req.sampling.get("max_new_tokens", 128)
                stop_ids = set(req.sampling.get("stop_token_ids") or ())
                if token in stop_ids or (token == EOS_TOKEN_ID and not req.sampling.get("ignore_eos")):
                    req.finished_reason = {"type": "stop", "matched": token}
                elif len(req.output_ids) >= max_new:
                    req.finished_reason = {"type": "length", "length": max_new}
            finished = req.finished_reason is not None
            # output_streamer.py:455-477: stream every token; non-stream every 50, and at the end.
            if finished or req.stream or len(req.output_ids) % FORCE_STREAM_INTERVAL == 0:
                self._send_output(req)
            if finished:
                self.running.remove(req)

    def _send_output(self, req: Req) -> None:
        finished = req.finished_reason is not None
        spans = compute_spans(req.version_events, self.weight_version, len(req.output_ids)) if finished and self.keeps_weight_version else None
        new_ids = req.output_ids[req.send_offset :]
        new_lps = req.logprobs[req.send_offset :]
        req.send_offset = len(req.output_ids)
        if new_ids or finished:
            self.send(BatchOut(req.rid, new_ids, new_lps, req.finished_reason, len(req.output_ids), spans, req.cached_tokens or 0))
