"""The contract's operations as calls: what every way in (HTTP routes, in-process Python, a Ray
actor handle) reaches, so that each gets the same defaults, the same checks and the same hooks.

Each operation takes the contract's request model (already validated: a route parses its body
into it, the in-process API builds it from keyword arguments with :func:`validated`) and the
*origin* of the call: the HTTP request a route answers, None for a Python call. Hooks receive the
origin as ``http_request``, so a plugin sees in-process calls as route calls without a request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Type, TypeVar

from pydantic import BaseModel, ValidationError

from engine_plugins.contract.errors import ContractError, shown
from engine_plugins.contract.schema import (
    AbortRequest,
    AbortResult,
    LoadsResult,
    PartialGenerateRequest,
    PartialGenerateResult,
    PauseRequest,
    PauseState,
    UpdateWeightVersionRequest,
    UpdateWeightVersionResult,
    WeightSwapBeginRequest,
    WeightSwapCommitRequest,
    WeightSwapResult,
)
from engine_plugins.host.config import Settings
from engine_plugins.host.dispatch import Hooks

Model = TypeVar("Model", bound=BaseModel)

MAX_PROBLEMS_SHOWN = 10
"""A 400 names this many problems and counts the rest (a list of a million bad values is one line)."""


def validated(model: Type[Model], fields: Mapping[str, Any]) -> Model:
    """*fields* as the request *model*, checked as a route checks a body: a 400 naming the problem."""
    try:
        return model.model_validate(dict(fields))
    except ValidationError as exc:
        raise ContractError(400, describe_validation_error(exc), param=problem_location(exc)) from None


def problem_location(exc: ValidationError) -> str:
    """The first problem's place as FastAPI names it in vLLM's errors: ``body.<field path>``."""
    loc = exc.errors()[0]["loc"] if exc.errors() else ()
    return ".".join(["body", *(str(part) for part in loc)])


def describe_validation_error(exc: ValidationError) -> str:
    """``field.path: what is wrong (got value)`` for each problem, joined by ``; ``: the first
    :data:`MAX_PROBLEMS_SHOWN` of them, then how many more, each value cut short."""
    errors = exc.errors()
    problems = []
    for err in errors[:MAX_PROBLEMS_SHOWN]:
        where = ".".join(str(part) for part in err["loc"])
        what = err["msg"]
        if err["type"] == "extra_forbidden":
            what = "unknown field"
        elif err["type"] == "value_error":
            # A validator's own message, which names its field when the error is the model's.
            what = str(err.get("ctx", {}).get("error", what))
        got = err.get("input")
        detail = f"{where}: {what}" if where else what
        if err["type"] not in ("missing",) and where and not isinstance(got, (dict, list)):
            detail += f" (got {shown(got)})"
        problems.append(detail)
    if len(errors) > MAX_PROBLEMS_SHOWN:
        problems.append(f"and {len(errors) - MAX_PROBLEMS_SHOWN} more problems")
    return "; ".join(problems)


@dataclass(frozen=True)
class Operations:
    """The contract's operations over one engine's hooks, with its settings' defaults."""

    hooks: Hooks
    settings: Settings

    async def abort(self, body: AbortRequest, origin: Any = None) -> AbortResult:
        """Abort by ids, every request, or by age; see ``POST /abort_requests``."""
        wait, timeout_s = body.wait, body.timeout_s if body.timeout_s is not None else self.settings.abort_timeout_s
        if "wait" not in body.model_fields_set:
            # No "wait" at all (vLLM's own /abort_requests body): settle briefly, so that a client
            # polling the load next no longer counts the requests just aborted.
            wait, timeout_s = True, body.timeout_s if body.timeout_s is not None else self.settings.abort_settle_s
        request_ids, reason = body.request_ids or None, "request"
        if body.by_age():
            # The selector becomes the exact ids of the requests it covers, so that every abort
            # plugin, old or new, sees an abort by ids and none can widen it to every request.
            control = self.hooks.control()
            request_ids, reason = await control.select_by_age(body.admitted_before, body.max_staleness), "stale"
            if not request_ids:
                return await control.nothing_aborted()
        return await self.hooks.call("abort", origin, request_ids=request_ids, wait=wait, timeout_s=timeout_s, reason=reason)

    async def loads(self, origin: Any = None) -> LoadsResult:
        """Running and waiting requests, exactly; see ``GET /v1/loads``."""
        return await self.hooks.call("loads", origin)

    async def update_weight_version(self, body: UpdateWeightVersionRequest, origin: Any = None) -> UpdateWeightVersionResult:
        """Bump the weight version, keeping in-flight requests unless asked (or configured) otherwise."""
        abort_all = body.abort_all_requests
        if abort_all is None:
            abort_all = self.settings.abort_on_weight_version
        return await self.hooks.call("update_weight_version", origin, new_version=body.new_version, abort_all_requests=abort_all)

    async def partial_generate(self, body: PartialGenerateRequest, origin: Any = None) -> PartialGenerateResult:
        """Generate, returning every token and logprob even when cut short."""
        return await self.hooks.call(
            "partial_generate", origin, input_ids=body.input_ids, sampling_params=body.sampling_params,
            request_id=body.request_id, max_staleness=body.max_staleness,
        )

    async def pause(self, body: PauseRequest, origin: Any = None) -> PauseState:
        """Pause in ``abort``, ``keep`` or ``wait`` mode; see ``POST /pause``."""
        return await self.hooks.call("pause", origin, mode=body.mode, timeout_s=self.settings.abort_timeout_s,
                                     clear_cache=body.clear_cache)

    async def resume(self, origin: Any = None) -> PauseState:
        """End the pause."""
        return await self.hooks.call("resume", origin)

    async def is_paused(self, origin: Any = None) -> PauseState:
        """The pause state, and the open weight swap if any."""
        return await self.hooks.call("is_paused", origin)

    async def begin_weight_swap(self, body: WeightSwapBeginRequest, origin: Any = None) -> PauseState:
        """Pause and open a weight swap to ``body.version``."""
        return await self.hooks.call(
            "begin_weight_swap", origin, version=body.version, mode=body.mode, clear_cache=body.clear_cache,
            lease_s=body.lease_s, timeout_s=self.settings.abort_timeout_s,
        )

    async def commit_weight_swap(self, body: WeightSwapCommitRequest, origin: Any = None) -> WeightSwapResult:
        """Publish the swap's version and resume."""
        return await self.hooks.call("commit_weight_swap", origin, swap_id=body.swap_id, version=body.version)
