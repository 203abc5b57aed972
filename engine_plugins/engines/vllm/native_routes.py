"""vLLM's own control routes as the RL frameworks call them, where the plugin serves them.

vLLM's dev-mode RL routes (``entrypoints/rl/online/api_router.py``) share five paths with the
contract, whose routes take their place there and answer a superset: ``/pause`` and ``/resume``
add vLLM's ``status`` to the contract's pause state (:data:`ANSWER_FIELDS`). Outside dev mode
vLLM has no ``GET /weight_info`` (TRL and Dynamo read it): the plugin serves it, with vLLM's
answer ``{"weight_version"}``, where the server lacks it (:data:`ALIAS_ROUTES`).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from engine_plugins.host.http_api import ContractRoute, RouteContext

ANSWER_FIELDS: dict[str, dict[str, Any]] = {
    "/pause": {"status": "paused"},
    "/resume": {"status": "resumed"},
}
"""Fields vLLM's own routes of these paths answer, added to the contract's answers."""


async def weight_info(ctx: RouteContext, request: Request) -> Any:
    """vLLM's dev-mode ``GET /weight_info``: the version new tokens are generated with."""
    return {"weight_version": ctx.hooks.control().weight_version()}


ALIAS_ROUTES: tuple[ContractRoute, ...] = (ContractRoute("/weight_info", "GET", weight_info),)
"""vLLM's dev-mode routes the plugin serves where the server lacks them."""
