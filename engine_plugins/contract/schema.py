"""The wire contract: request and response bodies, identical on every engine.

Request models are strict (no type coercion) and forbid unknown fields: a client that sends
SGLang's ``{"rid": ...}`` to ``/abort_requests`` gets a 400 naming ``rid`` instead of an
abort of every request on the server.

Every number and string a request carries is bounded, with the same bound on every engine, so
that one request means the same everywhere and none reaches an engine with a value it cannot
take: integers an engine turns into tensors stop at the int32 maximum (SGLang's scheduler died
building an int32 tensor from ``top_k = 2**31``; vLLM failed with a 500 on ``seed = 2**70``),
and names (versions, request ids) at :data:`MAX_NAME_CHARS` characters (a version becomes a
metric label).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_serializer, model_validator

from engine_plugins.contract.errors import shown

FinishReason = Literal["stop", "length", "abort"]
PauseMode = Literal["abort", "keep", "wait"]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Response(BaseModel):
    model_config = ConfigDict(extra="allow")


class _SaysSwapWhenOpen(_Response):
    """An answer that carries ``weight_swap`` only while a swap is open, so that it is
    unchanged for the clients of a server where none is."""

    @model_serializer(mode="wrap")
    def _without_closed_swap(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if data.get("weight_swap", ...) is None:
            del data["weight_swap"]
        return data


INT32_MAX = 2**31 - 1
"""The largest integer any field takes: SGLang and vLLM build int32 tensors from token ids,
``top_k``, lengths and seeds, and the tightest engine sets the bound for all."""

MAX_NAME_CHARS = 256
"""The longest version name or request id (far past a UUID or a step tag; a version name is a
metric label and a request id is held for the whole generation)."""

MAX_TIMEOUT_S = 3600.0
"""The longest ``timeout_s`` of an abort that waits: an hour, far past any abort's settling."""

MAX_TEMPERATURE = 2.0
"""vLLM refuses a temperature above 2 (SGLang takes any): the contract takes vLLM's range."""

Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
"""A version name or request id: 1 to :data:`MAX_NAME_CHARS` characters."""


# --- abort ---------------------------------------------------------------------------------


MAX_REQUEST_IDS = 100_000
"""The most ids one ``POST /abort_requests`` may name."""


class AbortRequest(_Request):
    """``POST /abort_requests``. No ids (absent, null or empty) means every request.

    Or one selector by age (:mod:`engine_plugins.core.versions` defines the order): ``admitted_before``
    aborts the requests admitted under a version older than that one, ``max_staleness`` those
    admitted that many bumps ago or more. A selector never comes with ``request_ids``, so that
    no combination of the two can be read as "every request".
    """

    # Bounded so that one call cannot make the server scan millions of ids; a fleet's rollout
    # batch is far smaller.
    request_ids: Optional[list[Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)]]] = Field(
        default=None, max_length=MAX_REQUEST_IDS
    )
    admitted_before: Optional[Name] = None
    # 0 would select every request: an abort-all is said with no selector at all.
    max_staleness: Optional[int] = Field(default=None, ge=1, le=INT32_MAX)
    wait: bool = False
    timeout_s: Optional[float] = Field(default=None, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_selector(self) -> "AbortRequest":
        given = [name for name in ("request_ids", "admitted_before", "max_staleness") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)}: give one of request_ids, admitted_before and max_staleness, not several")
        return self

    def by_age(self) -> bool:
        """Whether the abort selects requests by the version they were admitted under."""
        return self.admitted_before is not None or self.max_staleness is not None


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


class LoadsResult(_SaysSwapWhenOpen):
    """``GET /v1/loads``: per-rank figures, their sums, and the plugin's own view.

    ``timestamp`` (ISO 8601, UTC) and ``version`` (the engine's) are SGLang's own top-level
    fields; gateways that type them (smg reads both as strings) refuse a null, so neither is
    ever null. Their defaults only let the client read a server of an older plugin.
    """

    timestamp: str = ""
    version: str = ""
    loads: list[RankLoad]
    aggregate: LoadsAggregate
    in_flight: int
    paused: bool
    weight_version: str
    engine: str
    in_flight_by_version: dict[str, int] = Field(default_factory=dict)
    """In-flight requests by the version they were admitted under, oldest first (a name bumped
    to more than once counts all its generations)."""
    weight_swap: Optional["WeightSwap"] = None
    """The open weight swap, if one holds the server paused."""


# --- weight version ------------------------------------------------------------------------


class UpdateWeightVersionRequest(_Request):
    """``POST /update_weight_version``; ``abort_all_requests`` defaults to the environment's choice."""

    new_version: Name
    abort_all_requests: Optional[bool] = None


class UpdateWeightVersionResult(_Response):
    """The version change, and how many requests it aborted (0 unless asked)."""

    success: bool = True
    new_version: str
    previous_version: str
    aborted: int = 0
    message: str = ""
    """SGLang's own answer has it (``Weight version updated to v8``, the default); kept for its callers."""

    @model_validator(mode="after")
    def _default_message(self) -> "UpdateWeightVersionResult":
        if not self.message:
            self.message = f"Weight version updated to {self.new_version}"
        return self


# --- partial generation --------------------------------------------------------------------


class SamplingParams(_Request):
    """Sampling for ``/partial_generate``, named as in SGLang; each engine plugin translates."""

    max_new_tokens: int = Field(default=128, ge=1, le=INT32_MAX)
    temperature: float = Field(default=1.0, ge=0, le=MAX_TEMPERATURE, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(default=-1, ge=-1, le=INT32_MAX)
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    # Not negative: vLLM reads -1 as "no seed" where SGLang would seed with it.
    seed: Optional[int] = Field(default=None, ge=0, le=INT32_MAX)

    @field_validator("top_k")
    @classmethod
    def _top_k_is_off_or_positive(cls, value: int) -> int:
        # 0 disables top-k on vLLM but is refused by SGLang (its "off" is -1): one meaning only.
        if value == 0:
            raise ValueError(f"top_k must be -1 (no top-k) or 1 to {INT32_MAX}")
        return value


class PartialGenerateRequest(_Request):
    """``POST /partial_generate``: token ids in, token ids and logprobs out."""

    input_ids: list[int] = Field(min_length=1)
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    request_id: Optional[Name] = None
    max_staleness: Optional[int] = Field(default=None, ge=1, le=INT32_MAX)
    """Abort the request once this many bumps have happened since it was admitted."""

    @model_validator(mode="after")
    def _token_ids_are_in_range(self) -> "PartialGenerateRequest":
        # One problem named (the first id out of range), not one per id of a million-id list;
        # min and max run in C, so a valid prompt costs no Python loop.
        for field, ids in (("input_ids", self.input_ids), ("sampling_params.stop_token_ids", self.sampling_params.stop_token_ids)):
            if ids and (min(ids) < 0 or max(ids) > INT32_MAX):
                i, token = next((i, t) for i, t in enumerate(ids) if not 0 <= t <= INT32_MAX)
                raise ValueError(f"{field}[{i}] = {shown(token)}: token ids must be >= 0 and <= {INT32_MAX}")
        return self


class WeightVersionSpan(_Response):
    """Output tokens ``[start, end)`` were generated with weights ``version``."""

    version: str
    start: int
    end: int


class PartialGenerateResult(_Response):
    """Every token generated (with its logprob), why it stopped, and under which weights.

    ``cancel_reason`` says why a cancelled generation was cut: ``"abort"`` (an abort by id or of
    everything), ``"stale"`` (its ``max_staleness`` was reached, or an abort by age covered it),
    ``"pause"`` (a pause in ``abort`` mode), ``"weight_version"`` (a bump with
    ``abort_all_requests``); None when it was not cancelled or the engine ended it on its own.
    """

    request_id: str
    output_ids: list[int]
    output_logprobs: list[float]
    finish_reason: FinishReason
    cancelled: bool
    weight_versions: list[WeightVersionSpan]
    cancel_reason: Optional[str] = None
    cached_tokens: Optional[int] = None
    """Prompt tokens the engine served from its prefix cache, by its own count (SGLang's
    ``meta_info.cached_tokens``, vLLM's ``num_cached_tokens``); None where the engine gives none."""

    @model_validator(mode="after")
    def _one_logprob_per_token(self) -> "PartialGenerateResult":
        if len(self.output_logprobs) != len(self.output_ids):
            raise ValueError(
                f"{len(self.output_ids)} output ids but {len(self.output_logprobs)} logprobs"
            )
        return self


# --- pause ---------------------------------------------------------------------------------


class PauseRequest(_Request):
    """``POST /pause``: ``abort`` returns in-flight work now; ``keep`` freezes it until resume;
    ``wait`` admits nothing new and lets in-flight work finish (a drain), then is paused.

    ``clear_cache`` is vLLM's, with vLLM's meaning on every engine (None: true). In ``keep``
    mode it says what happens to the frozen requests' KV: true drops it (and the prefix cache)
    and recomputes the requests on resume, under the weights loaded by then (SGLang's
    ``retract``); false keeps it, and they go on from it (SGLang's ``in_place``). In ``abort``
    and ``wait`` mode it clears vLLM's caches once paused; other engines keep theirs.
    """

    mode: PauseMode = "abort"
    clear_cache: Optional[bool] = None


class WeightSwap(_Response):
    """An open weight swap (:mod:`engine_plugins.core.weight_swap`): begun, not yet committed.

    ``lease_expires_at`` is a Unix time; once it has passed, ``expired`` is true: the trainer
    that began the swap did not commit it in time, the weights may be half-loaded, and the
    server stays paused until a commit (or a resume) ends the swap.
    """

    swap_id: str
    version: str
    """The version the commit bumps to."""
    previous_version: str
    mode: PauseMode
    began_at: float
    lease_expires_at: float
    expired: bool = False


class PauseState(_SaysSwapWhenOpen):
    """``GET /is_paused``, and the answer of ``/pause`` and ``/resume``; ``weight_swap`` is the
    open weight swap that holds the pause, if one does."""

    is_paused: bool
    mode: Optional[PauseMode] = None
    weight_swap: Optional[WeightSwap] = None


# --- weight swap ---------------------------------------------------------------------------


DEFAULT_LEASE_S = 600.0
"""How long a begun weight swap may stay open before the server says it expired."""


class WeightSwapBeginRequest(_Request):
    """``POST /weight_swap/begin``: pause as ``/pause`` does (``mode``, ``clear_cache``) for a
    weight swap to ``version``, which the commit applies; ``lease_s``: how long the trainer
    may take to load the weights and commit."""

    version: Name
    mode: PauseMode = "keep"
    clear_cache: Optional[bool] = None
    lease_s: float = Field(default=DEFAULT_LEASE_S, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)


class WeightSwapCommitRequest(_Request):
    """``POST /weight_swap/commit``: the swap named by ``swap_id``, or the open swap to
    ``version`` (a fleet's trainer knows the version, not each server's id); one of the two."""

    swap_id: Optional[Name] = None
    version: Optional[Name] = None

    @model_validator(mode="after")
    def _one_name(self) -> "WeightSwapCommitRequest":
        if (self.swap_id is None) == (self.version is None):
            raise ValueError("give swap_id or version (one of them)")
        return self


class WeightSwapResult(_Response):
    """What a weight swap's begin or commit did: ``state`` ``"open"`` (paused, waiting for the
    trainer's weights) or ``"committed"`` (the version applied, generation resumed)."""

    swap_id: str
    version: str
    previous_version: str
    state: Literal["open", "committed"]
    is_paused: bool
    lease_expires_at: Optional[float] = None


# --- what the plugin mounted ------------------------------------------------------------------


ABOUT_PATH = "/v1/engine_plugins"
"""The read-only route that answers :class:`MountInfo` (under the route prefix, as every contract route)."""


class ProcessPart(_Response):
    """What the plugin installs in one of the engine's processes.

    ``seen`` is true for what the answering process installed itself or checked at startup (vLLM's
    engine-core utilities answer a call), false for what the plugin installs there by its rule
    without this process seeing it (SGLang's scheduler hooks): that process's own startup log line
    says it.
    """

    role: str
    pid: Optional[int] = None
    installed: list[str]
    seen: bool


class MountInfo(_Response):
    """``GET /v1/engine_plugins``: the plugin, the engine, and what is mounted where.

    Read-only and answered by the process that serves the request (with several vLLM API
    processes, the one that took the connection: ``api_server_index``). An answer at all means
    the contract's routes are on the app this server serves.
    """

    plugin: str = "engine_plugins"
    plugin_version: str
    engine: str
    """``sglang``, ``vllm`` or ``stub``."""
    engine_version: Optional[str] = None
    supported: Optional[str] = None
    """The engine releases this plugin version supports."""
    app: str
    """The app the routes are mounted on, by module (``sglang.srt.entrypoints.http_server.app``)."""
    pid: int
    role: str
    """What the answering process is in the engine (SGLang's HTTP server process, a vLLM API process)."""
    api_server_index: Optional[int] = None
    api_servers: int = 1
    routes: list[str]
    """``METHOD /path`` of every route the plugin serves here."""
    replaced: list[str] = Field(default_factory=list)
    """The engine's own routes the plugin serves in their place."""
    kept_native: list[str] = Field(default_factory=list)
    """Contract routes left unmounted because the engine's own is kept (``ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES``)."""
    processes: list[ProcessPart] = Field(default_factory=list)
    """What the plugin installs in each of the engine's processes, this one first."""
    shims: list[str] = Field(default_factory=list)
    """How the plugin adapts to this engine release."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The effective ``ENGINE_PLUGINS_*`` settings (the API key masked)."""
    ready: bool = True
    """Whether the engine is up under the contract (false before the engine client exists, or on a
    server without an engine)."""


class ErrorBody(BaseModel):
    """The ``error`` object of every 4xx/5xx answer: vLLM's ``ErrorInfo`` fields, with the
    contract's ``type`` words (on the paths vLLM serves too, vLLM's: docs/contract.md, "Errors")."""

    message: str
    type: str
    param: Optional[str] = None
    """Where the problem is, as FastAPI locates it (``body.new_version``, ``query.mode``), or null."""
    code: Optional[int] = None
    """The HTTP status."""


def error_body(message: str, type_: str, param: Optional[str] = None, code: Optional[int] = None) -> dict[str, Any]:
    """The JSON of an error answer: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": ErrorBody(message=message, type=type_, param=param, code=code).model_dump()}


CONTRACT_HEADER = "X-Engine-Plugins-Contract"
"""A client that reads the contract's answers sends this header (value ``1``). On an engine's own
route whose answer the engine's clients compare for equality (vLLM's ``/update_weight_version``),
only such a client gets the contract's fuller answer; every other caller gets the engine's."""


LoadsResult.model_rebuild()  # its weight_swap is defined after it
