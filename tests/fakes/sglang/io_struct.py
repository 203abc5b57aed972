"""The request objects of ``managers/io_struct.py`` that the plugin builds or reads."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Optional


@dataclass
class GenerateReqInput:
    """``io_struct.py:177``: only the fields the fake serves; single requests only."""

    rid: Optional[str] = None
    text: Optional[str] = None
    input_ids: Optional[list[int]] = None
    sampling_params: dict = field(default_factory=dict)
    return_logprob: bool = False
    stream: bool = False
    extra_key: Optional[str] = None
    """325: the radix cache's namespace; requests with different keys share no prefix."""
    cache_salt: Optional[str] = None
    """370: a second namespace part, next to ``extra_key`` (radix_cache.py:246)."""

    def normalize_batch_and_arguments(self) -> None:
        """A missing rid becomes a uuid4 hex; an empty ``extra_key`` or ``cache_salt`` is None
        (io_struct normalisation, 850-882)."""
        if isinstance(self.rid, list) or isinstance(self.input_ids and self.input_ids[0], list):
            raise ValueError("the SGLang fake serves single requests only")
        if self.rid is None:
            self.rid = uuid.uuid4().hex
        for name in ("extra_key", "cache_salt"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} should be a list or a string.")
            setattr(self, name, value or None)
        if self.input_ids is None:
            # The fake "tokenizer": one token per character, inside the tiny vocabulary.
            self.input_ids = [3 + (ord(c) % 200) for c in (self.text or " ")]


@dataclass
class TokenizedGenerateReqInput:
    """``io_struct.py:1065-1165``: what ``_create_tokenized_object`` builds and the scheduler
    receives; only the fields the fake serves (SGLang's ``input_ids`` is an ``array``)."""

    rid: str
    input_ids: list[int]
    sampling_params: dict
    stream: bool
    extra_key: Optional[str] = None  # 1137
    cache_salt: Optional[str] = None  # 1165


@dataclass
class UpdateWeightVersionReqInput:
    """``io_struct.py:2155-2159``: SGLang aborts every request unless told not to."""

    new_version: str
    abort_all_requests: bool = True


@dataclass
class PauseGenerationReqInput:
    """``io_struct.py:1927-1946``."""

    mode: Literal["abort", "retract", "in_place"] = "abort"


@dataclass
class ContinueGenerationReqInput:
    """``io_struct.py:1949-1955``."""

    torch_empty_cache: bool = True


@dataclass
class AbortReq:
    """``io_struct.py:2285-2296``: also the scheduler's echo for a request aborted while queued."""

    rid: str = ""
    abort_all: bool = False
    finished_reason: Optional[dict] = None
    abort_message: Optional[str] = None
    weight_versions: Optional[list[Any]] = None


@dataclass
class UpdateWeightFromDiskReqInput:
    """``io_struct.py:1970-1993``: only the fields the fake reads."""

    model_path: str
    load_format: Optional[str] = None
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    flush_cache: bool = True


@dataclass
class UpdateWeightsFromTensorReqInput:
    """``io_struct.py:2027-2048``: the tensors are not read (the fake has no weights to load)."""

    serialized_named_tensors: list = field(default_factory=list)
    load_format: Optional[str] = None
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    flush_cache: bool = True


@dataclass
class BeginWeightUpdateReqInput:
    """``io_struct.py:2197-2200``."""

    selector: str = "all"


@dataclass
class EndWeightUpdateReqInput:
    """``io_struct.py:2208-2209``."""


@dataclass
class QueueMetrics:
    """0.5.12 ``io_struct.py:2005-2016``: one rank's queues (the fake fills the waiting one)."""

    waiting: int
    grammar: int = 0
    paused: int = 0
    retracted: int = 0


@dataclass
class GetLoadsReqOutput:
    """0.5.12 ``io_struct.py:2041-2085``: one rank's loads before ``LoadSnapshot`` (0.5.13); the
    sections a rank has not are None, and SGLang's ``/v1/loads`` leaves them and ``timestamp`` out."""

    dp_rank: int
    timestamp: float
    num_running_reqs: int
    num_waiting_reqs: int
    num_used_tokens: int = 0
    num_total_tokens: int = 0
    max_total_num_tokens: int = 131072
    token_usage: float = 0.0
    gen_throughput: float = 0.0
    cache_hit_rate: float = 0.0
    utilization: float = 0.0
    max_running_requests: int = 4096
    memory: Optional[Any] = None
    speculative: Optional[Any] = None
    lora: Optional[Any] = None
    disaggregation: Optional[Any] = None
    queues: Optional[QueueMetrics] = None
