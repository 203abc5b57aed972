"""What smg 1.13.0 makes of a worker's ``GET /v1/loads``: its typed schema, mirrored field for field.

smg reads the answer with serde into ``WorkerLoadResponse`` (``crates/protocols/src/worker.rs``,
see docs/engine-notes.md): every field has a default, unknown fields are ignored, but a field it
types must have its type: integers as 32-bit ints (a float or a larger int is refused), floats as
numbers, strings as strings, and no null where the field is not optional. Any refusal, like an
empty ``loads``, makes smg remember the worker as having no loads endpoint. These models refuse
exactly what smg refuses (checked against the smg binary by tests/gateway/test_gateway_stub.py).
"""

from __future__ import annotations

from typing import Annotated, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

I32 = Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1)]
F64 = Union[StrictFloat, StrictInt]  # serde reads an integer into an f64


class _Smg(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Memory(_Smg):
    weight_gb: F64 = 0.0
    kv_cache_gb: F64 = 0.0
    graph_gb: F64 = 0.0
    token_capacity: I32 = 0


class Queues(_Smg):
    waiting: I32 = 0
    grammar: I32 = 0
    paused: I32 = 0
    retracted: I32 = 0


class SchedulerLoadSnapshot(_Smg):
    dp_rank: I32 = 0
    num_running_reqs: I32 = 0
    num_waiting_reqs: I32 = 0
    num_waiting_uncached_tokens: I32 = 0
    num_total_reqs: I32 = 0
    num_used_tokens: I32 = 0
    max_total_num_tokens: I32 = 0
    token_usage: F64 = 0.0
    gen_throughput: F64 = 0.0
    cache_hit_rate: F64 = 0.0
    utilization: F64 = 0.0
    max_running_requests: I32 = 0
    memory: Optional[Memory] = None
    queues: Optional[Queues] = None
    kv_transfer_latency_ms: Optional[F64] = None
    kv_transfer_speed_gb_s: Optional[F64] = None
    prefill_queue_reqs: Optional[I32] = None
    decode_queue_reqs: Optional[I32] = None
    disagg_mode: Optional[StrictStr] = None


class Aggregate(_Smg):
    total_running_reqs: I32 = 0
    total_waiting_reqs: I32 = 0
    total_reqs: I32 = 0
    avg_token_usage: F64 = 0.0
    avg_throughput: F64 = 0.0
    avg_utilization: F64 = 0.0


class WorkerLoadResponse(_Smg):
    timestamp: StrictStr = ""
    version: StrictStr = ""
    dp_rank_count: I32 = 0
    loads: list[SchedulerLoadSnapshot] = Field(min_length=1)  # an empty list: "no ranks yet"
    aggregate: Optional[Aggregate] = None
