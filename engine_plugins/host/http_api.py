"""The contract's HTTP routes, engine-neutral: parse, authenticate, call the hook, answer.

Bodies are parsed here rather than by FastAPI's validation, so that every engine answers bad
input with the same 400 JSON (SGLang and vLLM install their own, different, handlers for
FastAPI's 422) and so that errors never reach an engine's exception handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Mapping, Optional, Type

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect
from pydantic import BaseModel

from engine_plugins.host.about import ABOUT_PATH, MountFacts
from engine_plugins.host.config import Settings, describe
from engine_plugins.host.dispatch import INTERNAL_ERROR, Hooks, PluginError
from engine_plugins.host.operations import Operations, validated
from engine_plugins.contract.errors import ContractError, shown
from engine_plugins.contract.schema import (
    CONTRACT_HEADER,
    INT32_MAX,
    AbortRequest,
    PartialGenerateRequest,
    PauseRequest,
    UpdateWeightVersionRequest,
    WeightSwapBeginRequest,
    WeightSwapCommitRequest,
    error_body,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContractRoute:
    """One route of the contract: its path (without prefix), method and handler."""

    path: str
    method: str
    handler: Callable[["RouteContext", Request], Awaitable[Any]]


@dataclass(frozen=True)
class EngineAnswers:
    """How an engine's own route of a contract path answers, kept where the contract's route takes
    its place, so that the engine's callers (and its own tests) see the engine's route."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    """Fields the engine's route answers, added to the contract's answer."""
    only: Optional[tuple[str, ...]] = None
    """The engine's exact answer, for a caller that does not send :data:`CONTRACT_HEADER`: these
    fields of the contract's answer alone (the engine's clients compare the body for equality)."""
    error_type: Optional[Callable[[int], str]] = None
    """The engine's error ``type`` for an HTTP status, in place of the contract's word."""

    def answer(self, request: Request, answer: Any) -> Any:
        """The contract's *answer* as this route gives it to *request*'s caller."""
        if not isinstance(answer, dict):
            return answer
        if self.fields:
            answer = {**self.fields, **answer}
        if self.only is not None and request.headers.get(CONTRACT_HEADER) != "1":
            answer = {k: answer[k] for k in self.only if k in answer}
        return answer

    def error(self, message: str, type_: str, status: int, param: Optional[str] = None) -> JSONResponse:
        """An error answer in the contract's shape, with the engine's ``type`` where it has its own."""
        shown_type = self.error_type(status) if self.error_type is not None else type_
        return JSONResponse(error_body(message, shown_type, param, status), status_code=status)


CONTRACT_ANSWERS = EngineAnswers()
"""A contract route no engine route shares: the contract's answers as they are."""


@dataclass(frozen=True)
class RouteContext:
    """What a route's handler gets besides the request: the hooks and the settings."""

    hooks: Hooks
    settings: Settings
    about: Optional[MountFacts] = None
    """What the plugin mounted in this process, for ``GET /v1/engine_plugins``."""

    @property
    def ops(self) -> Operations:
        """The contract's operations the routes call (the same the in-process API calls)."""
        return Operations(self.hooks, self.settings)



THREADED_PARSE_BYTES = 1024 * 1024
"""Bodies larger than this are parsed (JSON, then the request model) in a worker thread."""


async def parse_body(request: Request, model: Type[BaseModel], max_bytes: int) -> Any:
    """Parse the JSON body into *model*; an absent body is ``{}``. Raises a 400 naming the problem,
    or a 413 naming the limit for a body over *max_bytes*: refused by its Content-Length before
    it is read when the client sends one, else as soon as the bytes read pass the limit (a
    chunked body is read as a stream, never whole, so it costs at most *max_bytes* of memory)."""
    raw = await read_body(request, max_bytes)
    if len(raw) > THREADED_PARSE_BYTES:
        # A 16 MiB body takes the JSON decoder and pydantic most of a second. Off the event loop
        # the other requests' I/O runs between the two steps; each step still holds the GIL
        # while it runs (docs/contract.md, "Bounds").
        return await asyncio.to_thread(_parse, raw, model)
    return _parse(raw, model)


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The body's bytes, read as a stream and refused (413) as soon as they pass *max_bytes*."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(f"the body of {int(declared)} bytes", max_bytes)
    received = bytearray()
    try:
        async for chunk in request.stream():
            received += chunk
            if len(received) > max_bytes:
                # The rest is never read into memory: the server drops it.
                raise _too_large(f"the body (read as far as {len(received)} bytes, no Content-Length)", max_bytes)
    except ClientDisconnect:
        # Gone before its body arrived: nobody to answer, nothing started, nothing to log.
        raise _client_closed() from None
    raw = bytes(received)
    # Starlette's own cache of the body: a hook that reads request.body() later still gets it
    # (the stream is consumed).
    request._body = raw
    return raw


def _parse(raw: bytes, model: Type[BaseModel]) -> Any:
    data: Any = {}
    if raw.strip():
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ContractError(400, f"malformed JSON body: {exc}") from None
        except RecursionError:
            raise ContractError(400, "malformed JSON body: nested too deeply") from None
        except ValueError:
            # Python's integer parsing refuses a number of more digits than its limit (4,300 by
            # default): far past any bound of the contract, so the number is the problem.
            raise ContractError(
                400, f"malformed JSON body: a number of more than {sys.get_int_max_str_digits()} digits "
                f"(no field takes an integer past {INT32_MAX})"
            ) from None
    if not isinstance(data, dict):
        raise ContractError(400, f"the body must be a JSON object, not {type(data).__name__}", param="body")
    return validated(model, data)


def _too_large(what: str, max_bytes: int) -> ContractError:
    return ContractError(
        413, f"{what} is over the limit of {max_bytes} bytes (ENGINE_PLUGINS_MAX_BODY_BYTES)", "request_too_large"
    )


def answer_json(result: Any) -> Any:
    """A hook's answer as JSON: a model dumped, anything else as it is."""
    return result.model_dump() if isinstance(result, BaseModel) else result



async def _abort(ctx: RouteContext, request: Request) -> Any:
    body = await parse_body(request, AbortRequest, ctx.settings.max_body_bytes)
    return answer_json(await ctx.ops.abort(body, request))


async def _loads(ctx: RouteContext, request: Request) -> Any:
    return answer_json(await ctx.ops.loads(request))


async def _update_weight_version(ctx: RouteContext, request: Request) -> Any:
    body = await parse_body(request, UpdateWeightVersionRequest, ctx.settings.max_body_bytes)
    return answer_json(await ctx.ops.update_weight_version(body, request))


async def _partial_generate(ctx: RouteContext, request: Request) -> Any:
    body = await parse_body(request, PartialGenerateRequest, ctx.settings.max_body_bytes)
    generation = asyncio.ensure_future(ctx.ops.partial_generate(body, request))
    # A client that hangs up no longer wants its tokens: abort the request rather than let it
    # hold the engine (and its KV cache) to the end.
    hang_up = asyncio.ensure_future(_disconnected(request))
    await asyncio.wait({generation, hang_up}, return_when=asyncio.FIRST_COMPLETED)
    if generation.done():
        hang_up.cancel()
        return answer_json(generation.result())
    generation.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await generation
    raise _client_closed()


def _client_closed() -> ContractError:
    return ContractError(499, "the client closed the connection; the request was aborted", "client_closed")


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects (the body is already read, so only that can arrive)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


_PAUSE_MODES = ("abort", "keep", "wait")
# vLLM reads its pause's clear_cache as a FastAPI bool query parameter: these spellings.
_QUERY_TRUE = ("1", "true", "on", "yes", "t", "y")
_QUERY_FALSE = ("0", "false", "off", "no", "f", "n")


async def _pause(ctx: RouteContext, request: Request) -> Any:
    body = await parse_body(request, PauseRequest, ctx.settings.max_body_bytes)
    mode = body.mode
    query_mode = request.query_params.get("mode")
    if query_mode is not None:
        if query_mode not in _PAUSE_MODES:
            raise ContractError(400, f"mode: expected 'abort', 'keep' or 'wait' (got {shown(query_mode)})", param="query.mode")
        if "mode" in body.model_fields_set and body.mode != query_mode:
            raise ContractError(400, f"mode: the query says {shown(query_mode)} but the body says {body.mode!r}", param="query.mode")
        mode = query_mode
    clear_cache = body.clear_cache
    query_clear = request.query_params.get("clear_cache")
    if query_clear is not None:
        value = query_clear.strip().lower()
        if value not in _QUERY_TRUE + _QUERY_FALSE:
            raise ContractError(400, f"clear_cache: expected true or false (got {shown(query_clear)})", param="query.clear_cache")
        if clear_cache is not None and clear_cache != (value in _QUERY_TRUE):
            raise ContractError(400, f"clear_cache: the query says {shown(query_clear)} but the body says {clear_cache!r}",
                                param="query.clear_cache")
        clear_cache = value in _QUERY_TRUE
    body = body.model_copy(update={"mode": mode, "clear_cache": clear_cache})
    return answer_json(await ctx.ops.pause(body, request))


async def _resume(ctx: RouteContext, request: Request) -> Any:
    return answer_json(await ctx.ops.resume(request))


async def _is_paused(ctx: RouteContext, request: Request) -> Any:
    return answer_json(await ctx.ops.is_paused(request))


async def _begin_weight_swap(ctx: RouteContext, request: Request) -> Any:
    body = await parse_body(request, WeightSwapBeginRequest, ctx.settings.max_body_bytes)
    return answer_json(await ctx.ops.begin_weight_swap(body, request))


async def _commit_weight_swap(ctx: RouteContext, request: Request) -> Any:
    body = await parse_body(request, WeightSwapCommitRequest, ctx.settings.max_body_bytes)
    return answer_json(await ctx.ops.commit_weight_swap(body, request))


CONTRACT_ROUTES: tuple[ContractRoute, ...] = (
    ContractRoute("/abort_requests", "POST", _abort),
    ContractRoute("/v1/loads", "GET", _loads),
    ContractRoute("/update_weight_version", "POST", _update_weight_version),
    ContractRoute("/partial_generate", "POST", _partial_generate),
    ContractRoute("/pause", "POST", _pause),
    ContractRoute("/resume", "POST", _resume),
    ContractRoute("/is_paused", "GET", _is_paused),
    ContractRoute("/weight_swap/begin", "POST", _begin_weight_swap),
    ContractRoute("/weight_swap/commit", "POST", _commit_weight_swap),
)


async def _about(ctx: RouteContext, request: Request) -> Any:
    """What the plugin mounted where, read-only: no hook, no engine call, so it answers while the
    engine starts and while it is paused."""
    if ctx.about is None:
        raise ContractError(404, "this server does not say what the plugin mounted", "not_found")
    return answer_json(ctx.about.answer(describe(ctx.settings)))


ABOUT_ROUTE = ContractRoute(ABOUT_PATH, "GET", _about)
"""``GET /v1/engine_plugins``: the plugin, the engine, and what is mounted where. Not a hook's
route (plugins do not answer it), so it stands beside :data:`CONTRACT_ROUTES`."""


def contract_paths(settings: Settings) -> list[tuple[str, str]]:
    """``(METHOD, full path)`` of every contract route under the configured prefix."""
    return [(r.method, settings.route_prefix + r.path) for r in CONTRACT_ROUTES]


def check_api_key(request: Request, keys: Iterable[str]) -> None:
    """Raise a 401 unless the request carries ``Authorization: Bearer <key>`` for one of *keys*.

    No keys configured means no check. The comparison is constant-time.
    """
    keys = [k for k in keys if k]
    if not keys:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and any(hmac.compare_digest(token.encode(), k.encode()) for k in keys):
        return
    raise ContractError(401, "missing or invalid API key: send 'Authorization: Bearer <key>'", "unauthorized")


def build_router(
    hooks: Hooks,
    settings: Settings,
    engine_api_keys: Callable[[], Iterable[str]] = lambda: (),
    engine_answers: Optional[Mapping[str, EngineAnswers]] = None,
    about: Optional[MountFacts] = None,
) -> APIRouter:
    """An APIRouter with every contract route under ``settings.route_prefix``, and with *about*
    (what the engine adapter mounted) ``GET /v1/engine_plugins``.

    Each route checks the API key (the engine's own keys, else ``ENGINE_PLUGINS_API_KEY``; read
    per request since the engine may configure them after the plugin loads), calls its hook and
    answers JSON. A :class:`ContractError` becomes its status; a plugin's failure a logged 500
    naming the plugin; anything else a logged 500. *engine_answers*: per contract path, how the
    engine's own route of that path answers (its fields, its exact answer, its error type).
    """
    routes = (*CONTRACT_ROUTES, ABOUT_ROUTE) if about is not None else CONTRACT_ROUTES
    return build_routes(hooks, settings, routes, engine_api_keys, settings.route_prefix, engine_answers, about)


def build_routes(
    hooks: Hooks,
    settings: Settings,
    routes: Iterable[ContractRoute],
    engine_api_keys: Callable[[], Iterable[str]] = lambda: (),
    prefix: str = "",
    engine_answers: Optional[Mapping[str, EngineAnswers]] = None,
    about: Optional[MountFacts] = None,
) -> APIRouter:
    """An APIRouter serving *routes* under *prefix*, each authenticated and answered as the
    contract's are (engines use it for their own routes that the plugin serves too)."""
    ctx = RouteContext(hooks=hooks, settings=settings, about=about)
    router = APIRouter()

    def keys() -> list[str]:
        # One rule on every engine: an engine with keys of its own decides (SGLang's middleware
        # runs before any route and vLLM's guards /v1/loads, so a second key could not open
        # every contract route); ENGINE_PLUGINS_API_KEY guards the routes of an engine without.
        own = [k for k in engine_api_keys() if k]
        return own or [settings.api_key or ""]

    for route in routes:
        router.add_api_route(
            prefix + route.path,
            _endpoint(ctx, route, keys, (engine_answers or {}).get(route.path, CONTRACT_ANSWERS)),
            methods=[route.method],
            name=f"engine_plugins{route.path.replace('/', '_')}",
        )
    return router


def _endpoint(ctx: RouteContext, route: ContractRoute, keys: Callable[[], list[str]], answers: EngineAnswers):
    async def endpoint(request: Request) -> JSONResponse:
        try:
            check_api_key(request, keys())
            return JSONResponse(answers.answer(request, await route.handler(ctx, request)))
        except ContractError as exc:
            return answers.error(exc.message, exc.type, exc.status, exc.param)
        except PluginError as exc:
            logger.error("engine_plugins: %s %s: %s", route.method, route.path, exc, exc_info=exc.error)
            return answers.error(exc.answer(), "internal_error", 500)
        except Exception:
            logger.exception("engine_plugins: %s %s failed", route.method, route.path)
            return answers.error(INTERNAL_ERROR, "internal_error", 500)

    endpoint.__name__ = f"engine_plugins{route.path.replace('/', '_')}"
    endpoint.__doc__ = route.handler.__doc__
    return endpoint

