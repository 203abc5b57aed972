"""SGLang's own control routes as the RL frameworks call them, served by the plugin: SGLang's
request bodies and answers (answers only gain fields), plus the plugin's fixes.

- ``POST /abort_request`` (SGLang's, replaced): ``{"abort_all": true}``, ``{"rid": id}`` or
  miles' ``{"rid": "<prefix>", "prefix": true}``. It goes through the contract's ``abort`` hook
  (the fence over every accepted request, exact ids, counted), and answers once the requests it
  covered are released, or after ``ENGINE_PLUGINS_ABORT_SETTLE_S``: a caller that polls the load
  next sees them gone. SGLang 0.5.23 answers an empty 200 and silently does nothing with a
  prefix; here the answer is the contract's abort result, and a prefix is honoured exactly.
- ``POST /pause_generation`` (SGLang's, replaced): ``abort`` mode (the default) holds new
  requests at the pause gate and aborts every request past it, answering as soon as they are
  released instead of on SGLang's one-second poll; ``in_place`` and ``retract`` are SGLang's
  own. Every mode is recorded as the contract's pause (``/is_paused`` says so).
- ``POST /continue_generation`` (SGLang's, replaced): the contract's resume, so that SGLang's
  pause and the contract's are one state with one owner, ended by either route. Its answer
  is SGLang's plus the contract's pause state.
- ``GET /get_load`` and ``GET /get_weight_version`` (and ``/weight_version``), which SGLang
  0.5.23 no longer has and ROLL and slime still call: served in the shape older SGLang
  versions answered, from the contract's true counts, only when the engine lacks them.

Each route parses its body and calls the operation it shares with the TokenizerManager's hooks
(:mod:`.native_calls`: :func:`abort_targets` and :func:`abort`, :func:`pause`, :func:`resume`),
so that ``await tm.pause_generation(...)`` called in the server's process (verl) or on an
in-process engine gets what the route gives. What each route did in SGLang, with file and line,
is in ``docs/engine-notes.md``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from engine_plugins.contract.errors import ContractError
from engine_plugins.host.http_api import ContractRoute, RouteContext, answer_json, parse_body
from engine_plugins.contract.schema import MAX_NAME_CHARS

_PAUSE_ANSWER = {"message": "Generation paused successfully.", "status": "ok"}
_CONTINUE_ANSWER = {"message": "Generation continued successfully.", "status": "ok"}


class NativeAbortRequest(BaseModel):
    """SGLang's ``AbortReq`` body as callers send it, and miles' ``prefix``.

    Unknown fields are ignored, as SGLang's own route does; the fields read are strict, and a
    ``rid`` is bounded as the contract's request ids are."""

    model_config = ConfigDict(extra="ignore", strict=True)

    rid: Optional[str] = Field(default=None, max_length=MAX_NAME_CHARS)
    abort_all: bool = False
    prefix: bool = False


class NativePauseRequest(BaseModel):
    """SGLang's ``PauseGenerationReqInput`` body."""

    model_config = ConfigDict(extra="ignore", strict=True)

    mode: str = Field(default="abort", max_length=16)


@dataclass(frozen=True)
class AbortTargets:
    """What a native abort covers: *request_ids* (None: every request), or nothing named."""

    request_ids: Optional[list[str]]
    named_nothing: bool = False
    """Neither a rid nor ``abort_all``: SGLang ignores such an abort (with a warning), so does this."""


def abort_targets(control: Any, rid: Optional[str], abort_all: bool, prefix: bool = False) -> AbortTargets:
    """The requests SGLang's abort of *rid* (or of every request) covers, exactly: the request
    whose rid it is (none for an unknown rid), or with *prefix* those whose rid starts with it.
    Synchronous: the TokenizerManager's ``abort_request`` hook calls it too."""
    if abort_all:
        return AbortTargets(None)
    if prefix:
        if not rid:
            raise ContractError(400, "rid: a prefix abort needs a non-empty rid prefix (to abort everything, send abort_all)")
        return AbortTargets(_ids_of(e for e in control.registry.select() if e.rid.startswith(rid)))
    if rid:
        entry = control.registry.get(rid)
        return AbortTargets([] if entry is None else [entry.request_id])
    return AbortTargets([], named_nothing=True)


async def abort(ctx: RouteContext, targets: AbortTargets, origin: Any = None, wait: bool = True) -> dict:
    """Abort *targets* through the contract's ``abort`` hook (the fence, exact ids, counted);
    with *wait*, answer once they are released or after ``ENGINE_PLUGINS_ABORT_SETTLE_S``.
    *origin*: the HTTP request (None for a Python call)."""
    control = ctx.hooks.control()
    if targets.named_nothing:
        return {**answer_json(await control.nothing_aborted()), "message": "nothing to abort: give rid or abort_all"}
    if targets.request_ids is not None and not targets.request_ids:
        return answer_json(await control.nothing_aborted())  # an unknown rid is not an error (ROLL sends it everywhere)
    result = await ctx.hooks.call(
        "abort", origin, request_ids=targets.request_ids, wait=wait, timeout_s=ctx.settings.abort_settle_s, reason="request"
    )
    return answer_json(result)


async def abort_request(ctx: RouteContext, request: Request) -> Any:
    """SGLang's ``/abort_request`` with the fence, exact ids, a count, and a settled answer."""
    body = await parse_body(request, NativeAbortRequest, ctx.settings.max_body_bytes)
    return await abort(ctx, abort_targets(ctx.hooks.control(), body.rid, body.abort_all, body.prefix), request)


def _ids_of(entries: Any) -> list[str]:
    """The client ids of *entries*, each once (the ids the abort hook takes)."""
    return list(dict.fromkeys(e.request_id for e in entries))


PAUSE_MODES = ("abort", "in_place", "retract")


async def pause(ctx: RouteContext, mode: str, origin: Any = None) -> dict:
    """SGLang's pause in *mode*; ``abort`` mode answers as soon as the requests are out.

    Every mode goes through the control's pause lock and is recorded there (``in_place`` and
    ``retract`` as the contract's ``keep``, ``abort`` as its ``abort``), so that ``/is_paused``,
    ``/v1/loads``, an abort by id and the next resume all know of it."""
    if mode not in PAUSE_MODES:
        raise ContractError(400, f"mode: expected 'abort', 'in_place' or 'retract' (got {mode!r})")
    control = ctx.hooks.control()
    seam = control.seam
    if mode != "abort":
        await control.hold("keep", lambda: seam.pause_scheduler(mode))
        return dict(_PAUSE_ANSWER)
    # As SGLang's: the gate closes (later requests wait for continue_generation) and every
    # request past it is aborted; those already held at the gate stay held.
    past_gate: list = []

    async def close_gate() -> None:
        past_gate.extend(await seam.drain())

    await control.hold("abort", close_gate)
    request_ids = _ids_of(past_gate)
    if not request_ids:
        return {**_PAUSE_ANSWER, **answer_json(await control.nothing_aborted())}
    result = await ctx.hooks.call(
        "abort", origin, request_ids=request_ids, wait=True, timeout_s=ctx.settings.abort_timeout_s, reason="pause"
    )
    return {**_PAUSE_ANSWER, **answer_json(result)}


async def pause_generation(ctx: RouteContext, request: Request) -> Any:
    """SGLang's ``/pause_generation`` (:func:`pause`)."""
    body = await parse_body(request, NativePauseRequest, ctx.settings.max_body_bytes)
    return await pause(ctx, body.mode, request)


async def resume(ctx: RouteContext, origin: Any = None) -> dict:
    """SGLang's ``continue_generation`` as the contract's resume: the same lock and record as
    ``/resume``, so that a pause made through either route is ended by either."""
    state = await ctx.hooks.call("resume", origin)
    return {**_CONTINUE_ANSWER, **answer_json(state)}


class NativeContinueRequest(BaseModel):
    """SGLang's ``ContinueGenerationReqInput`` body (its ``torch_empty_cache`` is accepted and,
    on the CPU and with the scheduler's own handling, left to SGLang's default)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    torch_empty_cache: bool = True


async def continue_generation(ctx: RouteContext, request: Request) -> Any:
    """SGLang's ``/continue_generation`` (:func:`resume`)."""
    await parse_body(request, NativeContinueRequest, ctx.settings.max_body_bytes)
    return await resume(ctx, request)


async def get_load(ctx: RouteContext, request: Request) -> Any:
    """An older SGLang's ``/get_load`` (``http_server.py`` of 0.5.20): one dict per DP rank, with
    ``num_reqs`` = running + waiting, from the contract's true counts."""
    loads = await ctx.hooks.call("loads", request)
    loads = answer_json(loads)
    now = time.perf_counter()
    out = []
    for rank in loads["loads"]:
        total_tokens = int(rank.get("num_total_tokens", rank.get("num_used_tokens", 0)) or 0)
        out.append(
            {
                "dp_rank": rank["dp_rank"],
                "num_reqs": rank["num_total_reqs"],
                "num_waiting_reqs": rank["num_waiting_reqs"],
                "num_tokens": total_tokens,
                "num_pending_tokens": total_tokens - int(rank.get("num_used_tokens", 0) or 0),
                "ts_tic": now,
            }
        )
    return out


async def get_weight_version(ctx: RouteContext, request: Request) -> Any:
    """An older SGLang's ``/get_weight_version`` and ``/weight_version``: ``{"weight_version"}``."""
    return {"weight_version": ctx.hooks.control().weight_version()}


REPLACED_ROUTES: tuple[ContractRoute, ...] = (
    ContractRoute("/abort_request", "POST", abort_request),
    ContractRoute("/pause_generation", "POST", pause_generation),
    ContractRoute("/continue_generation", "POST", continue_generation),
)
"""SGLang's routes the plugin serves in their place (with ``ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES``)."""

ALIAS_ROUTES: tuple[ContractRoute, ...] = (
    ContractRoute("/get_load", "GET", get_load),
    ContractRoute("/get_weight_version", "GET", get_weight_version),
    ContractRoute("/weight_version", "GET", get_weight_version),
)
"""Routes older SGLang versions had, served only where the running SGLang lacks them."""
