"""One parser for every load answer RL frameworks meet: running, waiting and total requests.

Accepted shapes (the engines' own in ``docs/engine-notes.md``):

- the contract's ``GET /v1/loads``: SGLang's shape plus ``in_flight``, ``paused``,
  ``weight_version`` and ``engine``, read with the contract's model
  (:class:`engine_plugins.contract.schema.LoadsResult`);
- SGLang's native ``GET /v1/loads``: ``{"loads": [{"dp_rank", "num_running_reqs",
  "num_waiting_reqs", ...}], "aggregate"?: {...}}`` (0.5.23 has no ``aggregate``; newer ones do);
- SGLang's legacy ``GET /get_load``: a list of ``{"dp_rank", "num_reqs", "num_waiting_reqs",
  "num_tokens", "ts_tic"}`` where ``num_reqs`` is running + waiting (SGLang's
  ``Scheduler.get_load``: ``num_reqs=len(self.running_batch.reqs) + num_waiting_reqs``);
- vLLM's Prometheus text (``GET /metrics``): the gauges ``vllm:num_requests_running`` and
  ``vllm:num_requests_waiting``, summed over label sets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from pydantic import ValidationError

from engine_plugins.contract.schema import LoadsResult
from engine_plugins.client.errors import answer_problems


class LoadParseError(ValueError):
    """The answer is none of the known load shapes; the message says what was seen."""


@dataclass(frozen=True)
class Load:
    """How busy one server is. ``total`` is what RL frameworks compare with 0 to call it idle."""

    running: int
    waiting: int
    total: int
    ranks: int = 1
    source: str = "contract"
    """Which shape it came from: ``contract``, ``sglang``, ``sglang-legacy`` or ``vllm-metrics``."""
    in_flight: Optional[int] = None
    """The contract's exact count of accepted, unfinished requests (None when not reported)."""
    paused: Optional[bool] = None
    weight_version: Optional[str] = None
    engine: Optional[str] = None
    in_flight_by_version: Optional[dict[str, int]] = None
    """The contract's in-flight requests by the version they were admitted under (None when not reported)."""

    @property
    def idle(self) -> bool:
        """No request anywhere on the server (the contract's ``in_flight`` too, when known)."""
        return self.total == 0 and not self.in_flight

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return {
            "running": self.running,
            "waiting": self.waiting,
            "total": self.total,
            "ranks": self.ranks,
            "source": self.source,
            "in_flight": self.in_flight,
            "paused": self.paused,
            "weight_version": self.weight_version,
            "engine": self.engine,
            "in_flight_by_version": self.in_flight_by_version,
            "idle": self.idle,
        }


def parse_loads(data: Any) -> Load:
    """A :class:`Load` from a decoded JSON load answer of any accepted shape.

    Raises :class:`LoadParseError` for anything else (for example vLLM's ``{"server_load": N}``,
    which counts HTTP requests, not the engine's queue).
    """
    if isinstance(data, list):
        return _sum_ranks(data, "sglang-legacy")
    if not isinstance(data, Mapping):
        raise LoadParseError(f"expected a JSON object or list of ranks, got {type(data).__name__}")
    if "server_load" in data and "loads" not in data:
        raise LoadParseError("vLLM's /load counts HTTP requests, not running/waiting requests; use /metrics")
    if "in_flight" in data and "engine" in data:
        try:
            return load_from_contract(LoadsResult.model_validate(data))
        except ValidationError as exc:
            raise LoadParseError(f"not the contract's loads ({answer_problems(exc)})") from None
    if not isinstance(data.get("loads"), list):
        raise LoadParseError(f"no 'loads' list in the answer (keys: {sorted(data)[:8]})")
    load = _sum_ranks(data["loads"], "sglang")
    aggregate = data.get("aggregate")
    if isinstance(aggregate, Mapping) and {"total_running_reqs", "total_waiting_reqs"} <= set(aggregate):
        # Prefer the server's own sums when it sends them.
        running, waiting = _int(aggregate, "total_running_reqs"), _int(aggregate, "total_waiting_reqs")
        total = _int(aggregate, "total_reqs") if "total_reqs" in aggregate else running + waiting
        load = Load(running, waiting, total, load.ranks, load.source)
    return load


def load_from_contract(result: LoadsResult) -> Load:
    """A :class:`Load` from the contract's ``GET /v1/loads`` answer: its own sums and view."""
    agg = result.aggregate
    return Load(
        agg.total_running_reqs,
        agg.total_waiting_reqs,
        agg.total_reqs,
        len(result.loads),
        "contract",
        in_flight=result.in_flight,
        paused=result.paused,
        weight_version=result.weight_version,
        engine=result.engine,
        in_flight_by_version=dict(result.in_flight_by_version),
    )


def _sum_ranks(ranks: list, source: str) -> Load:
    running = waiting = total = 0
    for i, rank in enumerate(ranks):
        if not isinstance(rank, Mapping):
            raise LoadParseError(f"rank {i}: expected an object, got {type(rank).__name__}")
        if "num_running_reqs" in rank or "num_total_reqs" in rank:
            r, w = _int(rank, "num_running_reqs", 0), _int(rank, "num_waiting_reqs", 0)
            t = _int(rank, "num_total_reqs") if "num_total_reqs" in rank else r + w
        elif "num_reqs" in rank:  # legacy /get_load: num_reqs counts running + waiting
            t, w = _int(rank, "num_reqs"), _int(rank, "num_waiting_reqs", 0)
            r = max(t - w, 0)
        else:
            raise LoadParseError(f"rank {i}: no request counts (keys: {sorted(rank)[:8]})")
        running, waiting, total = running + r, waiting + w, total + t
    return Load(running, waiting, total, len(ranks), source)


def _int(data: Mapping, key: str, default: Optional[int] = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise LoadParseError(f"{key}: expected a non-negative number, got {value!r}")
    return int(value)


_GAUGE = re.compile(r"^(vllm:num_requests_(?:running|waiting))(\{[^}]*\})?\s+([0-9.eE+-]+)")


def parse_vllm_metrics(text: str) -> Load:
    """A :class:`Load` from vLLM's Prometheus text: the running and waiting gauges, summed.

    vLLM updates these after engine steps, so right after an abort they can lag until the next
    step; the client uses them as a figure to show, not to decide idleness.
    """
    sums = {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}
    seen = set()
    for line in text.splitlines():
        match = _GAUGE.match(line)
        if match:
            sums[match.group(1)] += float(match.group(3))
            seen.add(match.group(1))
    if not seen:
        raise LoadParseError("no vllm:num_requests_running/waiting gauges in /metrics")
    running, waiting = int(sums["vllm:num_requests_running"]), int(sums["vllm:num_requests_waiting"])
    return Load(running, waiting, running + waiting, 1, "vllm-metrics")
