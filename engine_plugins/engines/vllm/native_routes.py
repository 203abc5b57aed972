"""vLLM's own control routes as the RL frameworks call them, where the plugin serves them.

vLLM's dev-mode RL routes (``entrypoints/rl/online/api_router.py``) share five paths with the
contract, whose routes take their place there and answer as vLLM's do (:data:`ENGINE_ANSWERS`):
``/pause`` and ``/resume`` add vLLM's ``status`` to the contract's pause state, ``/abort_requests``
has vLLM's ``status`` and ``aborted``, ``/update_weight_version`` answers vLLM's exact
``{"success", "new_version"}`` unless the caller asks for the contract's answer, and every error
has vLLM's ``type`` (the HTTP status phrase, as vLLM's ``HTTPException`` and validation handlers
give it) beside the ``param`` and ``code`` every contract error carries. Outside dev mode vLLM has
no ``GET /weight_info`` (TRL and Dynamo read it): the plugin serves it, with vLLM's answer
``{"weight_version"}``, where the server lacks it (:data:`ALIAS_ROUTES`).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import Request

from engine_plugins.host.http_api import ContractRoute, EngineAnswers, RouteContext


def error_type(status: int) -> str:
    """vLLM's error ``type`` for *status*: its phrase (``Bad Request``)."""
    return HTTPStatus(status).phrase


ENGINE_ANSWERS: dict[str, EngineAnswers] = {
    "/pause": EngineAnswers(fields={"status": "paused"}, error_type=error_type),
    "/resume": EngineAnswers(fields={"status": "resumed"}, error_type=error_type),
    "/is_paused": EngineAnswers(error_type=error_type),
    "/abort_requests": EngineAnswers(error_type=error_type),
    "/update_weight_version": EngineAnswers(only=("success", "new_version"), error_type=error_type),
    "/weight_info": EngineAnswers(error_type=error_type),
}
"""How vLLM's own routes of these paths answer (the contract's routes take their place)."""


async def weight_info(ctx: RouteContext, request: Request) -> Any:
    """vLLM's dev-mode ``GET /weight_info``: the version new tokens are generated with."""
    return {"weight_version": ctx.hooks.control().weight_version()}


ALIAS_ROUTES: tuple[ContractRoute, ...] = (ContractRoute("/weight_info", "GET", weight_info),)
"""vLLM's dev-mode routes the plugin serves where the server lacks them."""
