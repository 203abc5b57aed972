"""The wire contract: request and response bodies, identical on every engine.

Request models are strict (no type coercion) and forbid unknown fields: a client that sends
SGLang's ``{"rid": ...}`` to ``/abort_requests`` gets a 400 naming ``rid`` instead of an
abort of every request on the server.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

FinishReason = Literal["stop", "length", "abort"]
PauseMode = Literal["abort", "keep"]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Response(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- abort ---------------------------------------------------------------------------------


class AbortRequest(_Request):
    """``POST /abort_requests``. No ids (absent, null or empty) means every request."""

    request_ids: Optional[list[str]] = None
    wait: bool = False
    timeout_s: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)


class AbortResult(_Response):
    """What an abort did: ``aborted`` requests actually aborted, ``in_flight`` still held."""

    status: Literal["aborted"] = "aborted"
    aborted: int
    in_flight: int
    idle: bool
    timed_out: bool = False


# --- loads ---------------------------------------------------------------------------------


class RankLoad(_Response):
    """One data-parallel rank in SGLang's ``/v1/loads`` shape; engine-specific fields are kept."""

    dp_rank: int = 0
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    num_total_reqs: int = 0


class LoadsAggregate(_Response):
    """Sums over ``loads``, as SGLang's ``aggregate``."""

    total_running_reqs: int
    total_waiting_reqs: int
    total_reqs: int


class LoadsResult(_Response):
    """``GET /v1/loads``: per-rank figures, their sums, and the plugin's own view."""

    loads: list[RankLoad]
    aggregate: LoadsAggregate
    in_flight: int
    paused: bool
    weight_version: str
    engine: str


# --- weight version ------------------------------------------------------------------------


class UpdateWeightVersionRequest(_Request):
    """``POST /update_weight_version``; ``abort_all_requests`` defaults to the environment's choice."""

    new_version: str = Field(min_length=1)
    abort_all_requests: Optional[bool] = None


class UpdateWeightVersionResult(_Response):
    """The version change, and how many requests it aborted (0 unless asked)."""

    success: bool = True
    new_version: str
    previous_version: str
    aborted: int = 0


# --- partial generation --------------------------------------------------------------------


class SamplingParams(_Request):
    """Sampling for ``/partial_generate``, named as in SGLang; each engine plugin translates."""

    max_new_tokens: int = Field(default=128, ge=1)
    temperature: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(default=-1, ge=-1)
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    seed: Optional[int] = None


class PartialGenerateRequest(_Request):
    """``POST /partial_generate``: token ids in, token ids and logprobs out."""

    input_ids: list[int] = Field(min_length=1)
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    request_id: Optional[str] = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _token_ids_are_non_negative(self) -> "PartialGenerateRequest":
        if any(t < 0 for t in self.input_ids):
            raise ValueError("input_ids: token ids must be >= 0")
        if any(t < 0 for t in self.sampling_params.stop_token_ids):
            raise ValueError("sampling_params.stop_token_ids: token ids must be >= 0")
        return self


class WeightVersionSpan(_Response):
    """Output tokens ``[start, end)`` were generated with weights ``version``."""

    version: str
    start: int
    end: int


class PartialGenerateResult(_Response):
    """Every token generated (with its logprob), why it stopped, and under which weights."""

    request_id: str
    output_ids: list[int]
    output_logprobs: list[float]
    finish_reason: FinishReason
    cancelled: bool
    weight_versions: list[WeightVersionSpan]

    @model_validator(mode="after")
    def _one_logprob_per_token(self) -> "PartialGenerateResult":
        if len(self.output_logprobs) != len(self.output_ids):
            raise ValueError(
                f"{len(self.output_ids)} output ids but {len(self.output_logprobs)} logprobs"
            )
        return self


# --- pause ---------------------------------------------------------------------------------


class PauseRequest(_Request):
    """``POST /pause``: ``abort`` returns in-flight work now; ``keep`` freezes it until resume."""

    mode: PauseMode = "abort"


class PauseState(_Response):
    """``GET /is_paused``, and the answer of ``/pause`` and ``/resume``."""

    is_paused: bool
    mode: Optional[PauseMode] = None


class ErrorBody(BaseModel):
    """The ``error`` object of every 4xx/5xx answer."""

    message: str
    type: str


def error_body(message: str, type_: str) -> dict[str, Any]:
    """The JSON of an error answer: ``{"error": {"message", "type"}}``."""
    return {"error": ErrorBody(message=message, type=type_).model_dump()}
