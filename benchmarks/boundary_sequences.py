"""The step boundaries of figure 9: each framework's weight-swap sequence, as
``tests/swap/test_framework_swaps.py`` and ``tests/swap/test_vllm_transfer.py`` send it (their
module docstrings cite each framework's files and lines), and the contract's transaction.

A sequence runs while the step's tail is still in flight. It makes its calls through
:class:`Boundary`, which keeps every answer and the boundary's time: from its first call to the
answer of the call that lets generation go on again (the continue, resume or commit; ROLL, which
never pauses, ends with its ``/flush_cache``). Where the framework's code waits for the aborted
requests to come back before it goes on (the tests' ``gather``), the sequence waits for the tail
there too (:meth:`Boundary.settle_tail`).

Each sequence also says what the framework does with a request the boundary aborted
(:class:`Framework`), from the framework's code:

- slime aborts and drops: ``slime/rollout/sglang_rollout.py`` (THUDM/slime @0044b40d), ``abort()``
  returns no sample unless ``--partial-rollout`` (off by default), which is assumed here.
- AReaL sends an aborted request again with its tokens appended to the prompt
  (``areal/infra/remote_inf_engine.py:978-1058``), and so does verl, whose abort keeps the
  requests for its partial rollout (the verl test of ``test_framework_swaps.py``).
- miles and NeMo-RL retract, TRL, vime, SkyRL, prime-rl and the contract pause in ``keep`` mode,
  ROLL does not pause: their requests are not aborted at all.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

import httpx

# slime and miles loop on /flush_cache while SGLang refuses it (tests' flush(): 60 tries, 0.5 s apart).
FLUSH_TRIES, FLUSH_PAUSE_S = 60, 0.5


@dataclass
class Call:
    """One call of a boundary and its answer."""

    route: str
    status: Optional[int]
    ok: bool
    body: str


class Boundary:
    """One step's boundary on one server: the calls made, their answers, its time."""

    def __init__(self, http: httpx.AsyncClient, checkpoint: Path, version: str, tail: list[asyncio.Task],
                 sender: Optional["TensorSender"] = None) -> None:
        self.http, self.checkpoint, self.version, self.tail = http, checkpoint, version, tail
        self.sender = sender
        self.calls: list[Call] = []
        self.flush_refusals = 0
        self.started: Optional[float] = None
        self.ended: Optional[float] = None

    def _keep(self, route: str, status: Optional[int], text: str) -> None:
        """Keep an answer: a failure is a status other than 2xx, or ``success: false``."""
        ok = status is not None and 200 <= status < 300 and '"success":false' not in text.replace(" ", "")
        self.calls.append(Call(route, status, ok, text[:300]))

    async def call(self, method: str, path: str, body: Any = None, params: Optional[dict] = None,
                   ends: bool = False, keep: bool = True) -> Optional[httpx.Response]:
        """One call as the framework makes it (*body* None: no body at all); *ends*: the call
        after whose answer generation goes on."""
        if self.started is None:
            self.started = time.monotonic()
        route = path + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")
        try:
            if method == "GET":
                response = await self.http.get(path, params=params)
            elif body is None:
                response = await self.http.post(path, params=params)
            else:
                response = await self.http.post(path, json=body, params=params)
        except httpx.HTTPError as exc:  # the engine died (the step's health check says so)
            self._keep(route, None, f"{type(exc).__name__}: {exc}")
            response = None
        else:
            if keep:
                self._keep(route, response.status_code, response.text)
        if ends:
            self.ended = time.monotonic()
        return response

    async def flush(self, ends: bool = False) -> None:
        """SGLang's ``/flush_cache``, retried while refused, as slime and miles loop; the refusals
        are counted (the framework expects them) and only a flush never accepted is a failure."""
        for _ in range(FLUSH_TRIES):
            response = await self.call("GET", "/flush_cache", keep=False)
            if response is None or response.status_code == 200:
                break
            self.flush_refusals += 1
            await asyncio.sleep(FLUSH_PAUSE_S)
        self._keep("/flush_cache", None if response is None else response.status_code, "" if response is None else response.text)
        if ends:
            self.ended = time.monotonic()

    async def settle_tail(self) -> None:
        """Wait, as the framework's code does here, for the requests in flight to come back."""
        if self.tail:
            await asyncio.wait(self.tail)

    async def tensors(self, weight_version: Optional[str] = None, session: bool = False, flush: bool = True,
                      bump: Optional[str] = None) -> None:
        """The checkpoint as tensors (``send_tensors.py``'s calls), every answer kept."""
        if self.started is None:
            self.started = time.monotonic()
        for answer in await self.sender.send(str(self.http.base_url).rstrip("/"), self.checkpoint, weight_version, session, flush, bump):
            self._keep(answer["route"], answer["status"], json.dumps(answer["body"]))

    async def sglang_disk(self, **body: Any) -> None:
        """SGLang's ``/update_weights_from_disk`` with its defaults (``flush_cache`` true)."""
        await self.call("POST", "/update_weights_from_disk", {"model_path": str(self.checkpoint), **body})

    async def vllm_reload(self) -> None:
        """vLLM's in-place ``/collective_rpc reload_weights`` (the tests' stand-in for NCCL transfers)."""
        await self.call("POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(self.checkpoint)}})

    async def vllm_transfer(self, finish: Optional[dict] = None) -> None:
        """One weight-transfer session (the tests' ``file`` backend): start in checkpoint format,
        one update, finish."""
        await self.call("POST", "/start_weight_update", {"is_checkpoint_format": True})
        await self.call("POST", "/update_weights", {"update_info": {"path": str(self.checkpoint)}})
        await self.call("POST", "/finish_weight_update", finish if finish is not None else {})

    def seconds(self) -> Optional[float]:
        """First call to the answer that let generation go on."""
        return None if self.started is None or self.ended is None else self.ended - self.started


class TensorSender:
    """``tensor_sender.py`` in the SGLang venv, kept running across the figure's swaps."""

    def __init__(self, python: Path, key: str) -> None:
        script = Path(__file__).with_name("tensor_sender.py")
        # stderr to a file, not a pipe: torch's shared-memory manager would hold a pipe open.
        self.key = key
        self.process = subprocess.Popen([str(python), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self.lock = asyncio.Lock()
        assert json.loads(self.process.stdout.readline()).get("ready"), "tensor_sender.py did not start"

    def _send(self, ask: dict) -> list[dict]:
        self.process.stdin.write(json.dumps(ask) + "\n")
        self.process.stdin.flush()
        answers = []
        for line in self.process.stdout:
            answer = json.loads(line)
            if answer.get("done"):
                break
            answers.append(answer)
        return answers

    async def send(self, url: str, checkpoint: Path, weight_version: Optional[str], session: bool, flush: bool,
                   bump: Optional[str]) -> list[dict]:
        """One swap's calls and their answers."""
        ask = {"url": url, "key": self.key, "checkpoint": str(checkpoint), "weight_version": weight_version,
               "session": session, "flush": flush, "bump": bump}
        async with self.lock:
            return await asyncio.to_thread(self._send, ask)

    def close(self) -> None:
        """Stop the sender (its stdin closed ends its loop)."""
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --- SGLang (test_framework_swaps.py) ----------------------------------------------------------


async def slime(b: Boundary) -> None:
    """Abort pause, the aborted requests back, flush, sessionless tensors with the version, continue."""
    await b.call("POST", "/pause_generation", {})
    await b.settle_tail()
    await b.flush()
    await b.tensors(b.version, flush=False)
    await b.call("POST", "/continue_generation", {}, ends=True)


async def miles(b: Boundary) -> None:
    """Retract, flush, a session with the tensors and its own bump, continue."""
    await b.call("POST", "/pause_generation", {"mode": "retract"})
    await b.flush()
    await b.tensors(b.version, session=True, bump=b.version)
    await b.call("POST", "/continue_generation", {}, ends=True)


async def roll(b: Boundary) -> None:
    """No pause: sessionless tensors without flush, the requests run to their end, then a flush."""
    await b.tensors(flush=False)
    await b.settle_tail()
    await b.flush(ends=True)


async def areal(b: Boundary) -> None:
    """Abort pause then in_place, the cut requests back, a stock disk load aborting all, continue
    (the requests are sent again with their tokens after it: :data:`FRAMEWORKS`)."""
    await b.call("POST", "/pause_generation", {})
    await b.call("POST", "/pause_generation", {"mode": "in_place"})
    await b.settle_tail()
    await b.sglang_disk(abort_all_requests=True)  # no version: AReaL keeps its own
    await b.call("POST", "/continue_generation", {}, ends=True)


async def verl(b: Boundary) -> None:
    """Abort pause, the cut requests back, sessionless tensors with SGLang's defaults, flush,
    continue (verl with free_cache_engine false: SGLang's CPU build cannot release memory)."""
    await b.call("POST", "/pause_generation", {"mode": "abort"})
    await b.settle_tail()
    await b.tensors()
    await b.flush()
    await b.call("POST", "/continue_generation", {}, ends=True)


async def nemo_rl(b: Boundary) -> None:
    """Retract, one flush, its own session with the version on the tensors, continue."""
    await b.call("POST", "/pause_generation", {"mode": "retract"})
    await b.call("GET", "/flush_cache")  # tried once: NeMo-RL raises on anything but a 200
    await b.tensors(b.version, session=True, flush=False)
    await b.call("POST", "/continue_generation", {}, ends=True)


async def contract_sglang(b: Boundary) -> None:
    """The contract's transaction around SGLang's disk load with its defaults."""
    await b.call("POST", "/weight_swap/begin", {"version": b.version, "mode": "keep"})
    await b.sglang_disk()
    await b.call("POST", "/weight_swap/commit", {"version": b.version}, ends=True)


# --- vLLM (test_framework_swaps.py, test_vllm_transfer.py) ---------------------------------------


async def trl(b: Boundary) -> None:
    """Keep pause (vLLM's default clear_cache), the weights, resume."""
    await b.call("POST", "/pause", params={"mode": "keep"})
    await b.vllm_reload()
    await b.call("POST", "/resume", ends=True)


async def vime(b: Boundary) -> None:
    """Keep pause keeping the KV, a prefix-cache reset it goes on from whatever the answer, the
    weights, resume."""
    await b.call("POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
    await b.call("POST", "/reset_prefix_cache", params={"reset_running_requests": "false"})
    await b.vllm_reload()
    await b.call("POST", "/resume", ends=True)


async def skyrl(b: Boundary) -> None:
    """Keep pause keeping the KV, the weights (its NCCL broadcast), resume; the version client-side."""
    await b.call("POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
    await b.vllm_reload()
    await b.call("POST", "/resume", ends=True)


async def prime_rl(b: Boundary) -> None:
    """Keep pause keeping the KV, its in-place folder load, resume in a ``finally``."""
    await b.call("POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
    try:
        await b.vllm_reload()
    finally:
        await b.call("POST", "/resume", ends=True)


async def trl_transfer(b: Boundary) -> None:
    """TRL through vLLM's weight-transfer routes: keep pause, start, update, finish, resume."""
    await b.call("POST", "/pause", params={"mode": "keep"})
    await b.vllm_transfer()
    await b.call("POST", "/resume", ends=True)


async def vime_transfer(b: Boundary) -> None:
    """vime through the weight-transfer routes: its keep pause, its refused reset, the transfer,
    resume with ``{}``."""
    await b.call("POST", "/pause", {}, params={"mode": "keep", "clear_cache": "false"})
    # requests' params: its False goes as "False".
    await b.call("POST", "/reset_prefix_cache", params={"reset_running_requests": "False", "reset_external": "False"})
    await b.vllm_transfer()
    await b.call("POST", "/resume", {}, ends=True)


async def contract_vllm(b: Boundary) -> None:
    """The contract's transaction around vLLM's in-place reload."""
    await b.call("POST", "/weight_swap/begin", {"version": b.version, "mode": "keep"})
    await b.vllm_reload()
    await b.call("POST", "/weight_swap/commit", {"version": b.version}, ends=True)


@dataclass(frozen=True)
class Framework:
    """One row's framework: its boundary, the route it generates with, and what it does with a
    request the boundary aborted."""

    name: str
    boundary: Callable[[Boundary], Awaitable[None]]
    route: str
    """``generate`` (SGLang's ``/generate``), ``completions`` (vLLM's ``/v1/completions``),
    ``salted`` (the same with prime-rl's ``cache_salt``: the policy version the request started
    under) or ``contract`` (``/partial_generate``)."""
    resends: bool = False
    """An aborted request is sent again with its tokens appended to its prompt."""
    plugin_only: bool = False
    uses_transfer: bool = False
    """Needs ``/init_weight_transfer_engine`` once per server (at the trainer's start)."""
    note: str = ""


SGLANG = (
    Framework("slime", slime, "generate", note="aborted requests dropped (--partial-rollout off)"),
    Framework("miles", miles, "generate", note="retracted: kept"),
    Framework("ROLL", roll, "generate", note="no pause: kept"),
    Framework("AReaL", areal, "generate", resends=True, note="aborted, sent again with their tokens"),
    Framework("verl", verl, "generate", resends=True, note="aborted, kept for its partial rollout"),
    Framework("NeMo-RL", nemo_rl, "generate", note="retracted: kept"),
    Framework("contract", contract_sglang, "contract", plugin_only=True, note="keep: kept"),
)
VLLM = (
    Framework("TRL", trl, "completions", note="keep: kept"),
    Framework("vime", vime, "completions", note="keep: kept"),
    Framework("SkyRL", skyrl, "completions", note="keep: kept"),
    Framework("prime-rl", prime_rl, "salted", note="keep: kept"),
    Framework("TRL (transfer)", trl_transfer, "completions", uses_transfer=True, note="keep: kept"),
    Framework("vime (transfer)", vime_transfer, "completions", uses_transfer=True, note="keep: kept"),
    Framework("contract", contract_vllm, "contract", plugin_only=True, note="keep: kept"),
)
FRAMEWORKS = {"sglang": SGLANG, "vllm": VLLM}
