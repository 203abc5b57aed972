"""Does a running server have the contract mounted? ``GET /v1/engine_plugins`` says what the
plugin mounted there and where; a server without it is named from its own routes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import httpx
from pydantic import ValidationError

from engine_plugins.client.errors import ServerError, answer_problems
from engine_plugins.client.transport import Transport, make_http_client
from engine_plugins.contract.schema import ABOUT_PATH, MountInfo


@dataclass(frozen=True)
class MountCheck:
    """What a server said: ``info`` when the contract is mounted; otherwise which engine it looks
    like (``engine``, ``engine_version``, from its own routes) and ``detail``, a sentence."""

    url: str
    mounted: bool
    info: Optional[MountInfo] = None
    engine: Optional[str] = None
    engine_version: Optional[str] = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return {"url": self.url, "mounted": self.mounted, "engine": self.engine, "engine_version": self.engine_version,
                "detail": self.detail, "info": self.info.model_dump() if self.info is not None else None}


async def check_mounted(url: str, api_key: Optional[str] = None, timeout_s: float = 10.0) -> MountCheck:
    """Ask the server at *url* (a base URL, with the route prefix if it has one) what the plugin
    mounted. Raises :class:`ServerError` when the server cannot be reached, refuses the key, or
    answers the route with something else than the contract's answer; a server without the route
    (404) is a :class:`MountCheck` with ``mounted`` false, naming the engine it looks like."""
    async with make_http_client(api_key) as http:
        transport = Transport(url, http)
        try:
            answer = await transport.call("GET", ABOUT_PATH, timeout_s=timeout_s)
        except ServerError as exc:
            if exc.kind != "not_found":
                raise
            return await _not_mounted(transport, timeout_s)
        try:
            info = MountInfo.model_validate(answer)
        except ValidationError as exc:
            raise ServerError(transport.url, "protocol", f"GET {ABOUT_PATH}: not the plugin's answer ({answer_problems(exc)})") from None
        where = f"{info.engine} {info.engine_version or ''}".strip()
        return MountCheck(transport.url, True, info, info.engine, info.engine_version,
                          f"the contract is mounted on {where} by engine_plugins {info.plugin_version}")


async def _not_mounted(transport: Transport, timeout_s: float) -> MountCheck:
    """A server without ``GET /v1/engine_plugins``: vLLM answers ``GET /version``, SGLang
    ``GET /server_info`` (``/get_server_info`` before 0.5.x's rename); anything else is unknown."""
    # The engine's own routes are at its root, whatever prefix the contract's would have.
    engine, version = await _which_engine(Transport(str(httpx.URL(transport.url).copy_with(path="/", query=None)), transport.http), timeout_s)
    if engine == "vllm":
        fix = ("start it with VLLM_PLUGINS=engine_plugins (an allowlist: name every plugin you need) "
               "with engine-plugins installed in vLLM's environment")
    elif engine == "sglang":
        fix = ("install engine-plugins in SGLang's environment; if SGLANG_PLUGINS is set, it must name engine_plugins; "
               "SGLang loads plugins in the process that runs launch_server or Engine")
    else:
        fix = "check the URL (with the route prefix, if ENGINE_PLUGINS_ROUTE_PREFIX is set)"
    looks = f"{'SGLang' if engine == 'sglang' else 'vLLM'} {version or ''}".strip() if engine else "a server of unknown kind"
    return MountCheck(transport.url, False, None, engine, version,
                      f"the server at {transport.url} does not have the contract mounted "
                      f"(GET {ABOUT_PATH} -> 404); it looks like {looks}: {fix}")


async def _which_engine(transport: Transport, timeout_s: float) -> tuple[Optional[str], Optional[str]]:
    """``(engine, version)`` from the engine's own read-only routes, or ``(None, None)``."""
    answer = await _get(transport, "/version", timeout_s)
    # vLLM's {"version": ...}; SGLang has no /version (its version is in /server_info).
    if isinstance(answer, dict) and isinstance(answer.get("version"), str) and "model_path" not in answer:
        return "vllm", answer["version"]
    for path in ("/server_info", "/get_server_info"):
        answer = await _get(transport, path, timeout_s)
        if isinstance(answer, dict) and ("model_path" in answer or "tp_size" in answer):
            version = answer.get("version")
            return "sglang", version if isinstance(version, str) else None
    return None, None


async def _get(transport: Transport, path: str, timeout_s: float) -> Any:
    """The JSON of a GET, or None when the route is absent or answers an error."""
    try:
        return await transport.call("GET", path, timeout_s=timeout_s)
    except ServerError as exc:
        if exc.kind in ("not_found", "http", "protocol", "unauthorized"):
            return None
        raise
