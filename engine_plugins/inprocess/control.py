"""The contract on an engine held in this process, as Python calls.

:class:`EngineControl` is what :func:`~engine_plugins.inprocess.attach` returns for an in-process
engine (vLLM's ``AsyncLLM``, SGLang's ``Engine`` or its TokenizerManager). Its methods are the
contract's operations with the routes' defaults, checks and errors: they call the same hooks the
routes call (:mod:`engine_plugins.host.operations`), so a third-party plugin sees both, and a bad
argument raises the :class:`~engine_plugins.ContractError` whose status and message the route
would answer. :meth:`EngineControl.app` serves the same control as the contract's HTTP routes,
and :meth:`EngineControl.http` answers one HTTP request without a socket (what a Ray actor
handle carries, :mod:`engine_plugins.inprocess.ray_actor`).
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Mapping, Optional, Sequence

import httpx
from fastapi import FastAPI

from engine_plugins.contract.errors import ContractError
from engine_plugins.contract.schema import (
    DEFAULT_LEASE_S,
    AbortRequest,
    AbortResult,
    LoadsResult,
    PartialGenerateRequest,
    PartialGenerateResult,
    PauseRequest,
    PauseState,
    SamplingParams,
    UpdateWeightVersionRequest,
    UpdateWeightVersionResult,
    WeightSwapBeginRequest,
    WeightSwapCommitRequest,
    WeightSwapResult,
)
from engine_plugins.core.delivery import install_outermost
from engine_plugins.host.assembly import PluginStack
from engine_plugins.host.operations import Operations, validated

# The base URL of the in-process app (never a socket: the ASGI app is called directly).
_IN_PROCESS_URL = "http://in-process"


def _given(**fields: Any) -> dict[str, Any]:
    """The fields a caller gave (None: not given, so the model's default applies, as in a body)."""
    return {k: v for k, v in fields.items() if v is not None}


class EngineControl:
    """The contract's operations on one in-process engine: ``await control.abort()``,
    ``await control.pause("keep")``, ``async with control.weight_swap("v2"): ...``.

    Every method raises :class:`~engine_plugins.ContractError` (``status``, ``message``) where the
    matching route answers an error, and nothing is started when it does.
    """

    def __init__(self, stack: PluginStack, engine: str) -> None:
        self.stack = stack
        self.engine = engine
        """``"vllm"`` or ``"sglang"`` (``"stub"`` for the idealised engine)."""
        self.ops = Operations(stack.hooks, stack.settings)
        self._app: Optional[FastAPI] = None
        self._http: Optional[httpx.AsyncClient] = None

    # --- the contract's operations --------------------------------------------------------------

    async def abort(self, request_ids: Optional[Sequence[str]] = None, *, wait: bool = True,
                    timeout_s: Optional[float] = None, admitted_before: Optional[str] = None,
                    max_staleness: Optional[int] = None) -> AbortResult:
        """Abort *request_ids* exactly (None: every request), or the requests admitted before a
        version (*admitted_before*) or *max_staleness* bumps ago; with *wait* (the default here),
        return once they are out, within *timeout_s* (``ENGINE_PLUGINS_ABORT_TIMEOUT_S``)."""
        body = validated(AbortRequest, _given(
            request_ids=None if request_ids is None else list(request_ids), admitted_before=admitted_before,
            max_staleness=max_staleness, timeout_s=timeout_s, wait=wait,
        ))
        return await self.ops.abort(body)

    async def loads(self) -> LoadsResult:
        """Running and waiting requests, exactly, with the pause state and the weight version."""
        return await self.ops.loads()

    async def update_weight_version(self, new_version: str, abort_all_requests: Optional[bool] = None) -> UpdateWeightVersionResult:
        """Bump the weight version; in-flight requests are kept unless *abort_all_requests*
        (None: ``ENGINE_PLUGINS_ABORT_ON_WEIGHT_VERSION``, false by default)."""
        body = validated(UpdateWeightVersionRequest, _given(new_version=new_version, abort_all_requests=abort_all_requests))
        return await self.ops.update_weight_version(body)

    async def partial_generate(self, input_ids: Sequence[int], sampling_params: Optional[Mapping[str, Any] | SamplingParams] = None,
                               request_id: Optional[str] = None, max_staleness: Optional[int] = None) -> PartialGenerateResult:
        """Generate from *input_ids*, returning every token, its logprob and the weight versions
        that made it, even when an abort or a pause cuts the request short."""
        params = sampling_params.model_dump(exclude_unset=True) if isinstance(sampling_params, SamplingParams) else sampling_params
        body = validated(PartialGenerateRequest, _given(
            input_ids=list(input_ids), sampling_params=params, request_id=request_id, max_staleness=max_staleness,
        ))
        return await self.ops.partial_generate(body)

    async def pause(self, mode: str = "abort", clear_cache: Optional[bool] = None) -> PauseState:
        """Pause: ``abort`` returns in-flight requests now (and waits until they are out),
        ``keep`` freezes them until :meth:`resume`, ``wait`` lets them finish first."""
        return await self.ops.pause(validated(PauseRequest, _given(mode=mode, clear_cache=clear_cache)))

    async def resume(self) -> PauseState:
        """End the pause; held and frozen requests go on."""
        return await self.ops.resume()

    async def is_paused(self) -> PauseState:
        """The pause state, and the open weight swap if any."""
        return await self.ops.is_paused()

    async def begin_weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                                lease_s: float = DEFAULT_LEASE_S) -> WeightSwapResult:
        """Pause (in *mode*) for a weight swap to *version*, which :meth:`commit_weight_swap` applies."""
        body = validated(WeightSwapBeginRequest, _given(version=version, mode=mode, clear_cache=clear_cache, lease_s=lease_s))
        return await self.ops.begin_weight_swap(body)

    async def commit_weight_swap(self, version: Optional[str] = None, swap_id: Optional[str] = None) -> WeightSwapResult:
        """Publish the open swap's version (named by *version* or *swap_id*) and resume."""
        return await self.ops.commit_weight_swap(validated(WeightSwapCommitRequest, _given(version=version, swap_id=swap_id)))

    @contextlib.asynccontextmanager
    async def weight_swap(self, version: str, mode: str = "keep", clear_cache: Optional[bool] = None,
                          lease_s: float = DEFAULT_LEASE_S) -> AsyncIterator[WeightSwapResult]:
        """Begin a weight swap, load the weights in the block, commit on leaving it. A block that
        raises leaves the swap open (paused, the version unpublished) and re-raises."""
        began = await self.begin_weight_swap(version, mode, clear_cache, lease_s)
        yield began
        await self.commit_weight_swap(swap_id=began.swap_id)

    def weight_version(self) -> str:
        """The weight version new tokens are generated with."""
        return self.stack.hooks.control().weight_version()

    # --- the same control over HTTP -------------------------------------------------------------

    def app(self) -> FastAPI:
        """A FastAPI app with the contract's routes over this engine (and ``GET /v1/engine_plugins``):
        serve it (uvicorn) to reach an in-process engine over HTTP."""
        if self._app is None:
            app = FastAPI(title="engine-plugins (in-process)")
            app.include_router(self.stack.router)
            # An abort with wait answers once the answers of the requests it covered are written,
            # here as on the engines' own apps: routes added to this app (a holder's own
            # generation routes) are covered too.
            install_outermost(app)
            self._app = app
        return self._app

    async def http(self, method: str, path: str, body: Optional[bytes] = None, params: Optional[Mapping[str, str]] = None,
                   headers: Optional[Mapping[str, str]] = None) -> tuple[int, str, bytes]:
        """One HTTP request answered by :meth:`app` in this process, without a socket:
        ``(status, reason, body)``."""
        if self._http is None:
            self._http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app()), base_url=_IN_PROCESS_URL,
                                           timeout=None)
        response = await self._http.request(method, path, content=body, params=params, headers=dict(headers or {}))
        return response.status_code, response.reason_phrase, response.content


__all__ = ["ContractError", "EngineControl"]
