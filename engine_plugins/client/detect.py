"""Which API a server speaks: the contract (this package's plugin, or the stub), SGLang without
the plugin, or vLLM's native dev-mode routes. The client adapts to each and says which it found."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from engine_plugins.client.errors import ServerError
from engine_plugins.client.transport import Transport


class Flavor(str, Enum):
    """The three APIs the client can drive."""

    CONTRACT = "contract"
    SGLANG = "sglang-native"
    VLLM = "vllm-native"


@dataclass(frozen=True)
class Detection:
    """What a server is: its API, its engine, the engine's version when it says, and a sentence."""

    flavor: Flavor
    engine: str
    version: Optional[str]
    detail: str

    def to_dict(self) -> dict:
        """Plain JSON-ready fields."""
        return {"flavor": self.flavor.value, "engine": self.engine, "version": self.version, "detail": self.detail}


async def detect(transport: Transport, timeout_s: float = 10.0) -> Detection:
    """Find out which API *transport*'s server speaks, from read-only GETs.

    ``GET /v1/loads`` with ``in_flight`` and ``engine`` is the contract; with only ``loads`` it is
    SGLang's own. Else ``GET /get_load`` (older SGLang), then ``GET /is_paused`` answering
    ``{"is_paused": bool}`` (vLLM's dev-mode RL routes, mounted with
    ``VLLM_SERVER_DEV_MODE=1``). Raises :class:`ServerError` when the server cannot be reached,
    refuses the key, or speaks none of them (the message says what to install or set).
    """
    loads = await _get(transport, "/v1/loads", timeout_s)
    if isinstance(loads, dict) and "in_flight" in loads and "engine" in loads:
        engine = str(loads["engine"])
        return Detection(Flavor.CONTRACT, engine, None, f"engine-plugins contract on {engine}")
    if isinstance(loads, dict) and isinstance(loads.get("loads"), list):
        version = loads.get("version")
        return Detection(
            Flavor.SGLANG, "sglang", version, f"SGLang {version or ''} without the plugin: native /abort_request, /v1/loads polled".replace("  ", " ")
        )
    legacy = await _get(transport, "/get_load", timeout_s)
    if isinstance(legacy, list):
        return Detection(Flavor.SGLANG, "sglang", None, "older SGLang without the plugin: native /abort_request, /get_load polled")
    paused = await _get(transport, "/is_paused", timeout_s)
    version_info = await _get(transport, "/version", timeout_s)
    version = version_info.get("version") if isinstance(version_info, dict) else None
    if isinstance(paused, dict) and isinstance(paused.get("is_paused"), bool) and "mode" not in paused:
        return Detection(Flavor.VLLM, "vllm", version, f"vLLM {version or ''} without the plugin: native dev-mode routes".replace("  ", " "))
    if version is not None:
        raise ServerError(
            transport.url,
            "unsupported",
            f"vLLM {version} without the plugin and without dev mode has no control routes: start it with "
            "VLLM_PLUGINS=engine_plugins (engine-plugins installed), or set VLLM_SERVER_DEV_MODE=1",
        )
    raise ServerError(
        transport.url, "unsupported", "not a known engine: no /v1/loads, /get_load or /is_paused answered (is the URL right?)"
    )


async def _get(transport: Transport, path: str, timeout_s: float):
    """The JSON of a GET, or None when the route does not exist or answers with an error.

    Unreachable, timed-out and unauthorized servers raise: trying other routes cannot help.
    """
    try:
        return await transport.call("GET", path, timeout_s=timeout_s)
    except ServerError as exc:
        if exc.kind in ("not_found", "http", "protocol"):
            return None
        raise
