"""Every ``ENGINE_PLUGINS_*`` environment variable, read and validated in one place.

A bad value raises :class:`ConfigError` naming the variable, so the engine stops at startup
instead of serving with a setting nobody asked for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Callable, Mapping, Optional

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """An ``ENGINE_PLUGINS_*`` variable has a value that cannot be used."""


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


def _positive_seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{name}={raw!r}: expected a positive, finite number of seconds")
    return value


def _positive_bytes(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a whole number of bytes") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r}: expected a positive number of bytes")
    return value


def _route_prefix(name: str, raw: str) -> str:
    value = raw.strip()
    if value == "":
        return ""
    if not value.startswith("/") or value.endswith("/") or " " in value:
        raise ConfigError(f"{name}={raw!r}: expected '' or a path like '/rl' (leading '/', no trailing '/')")
    return value


def _name_list(name: str, raw: str) -> frozenset[str]:
    names = [part.strip() for part in raw.split(",")]
    return frozenset(n for n in names if n)


def _optional_text(name: str, raw: str) -> Optional[str]:
    return raw or None


@dataclass(frozen=True)
class Settings:
    """The effective configuration. What each variable does, for users: :data:`MEANINGS`."""

    route_prefix: str = ""
    """ENGINE_PLUGINS_ROUTE_PREFIX: path prefix for every contract route (default empty)."""
    api_key: Optional[str] = None
    """ENGINE_PLUGINS_API_KEY: bearer key accepted on the contract routes, besides the engine's own keys."""
    abort_timeout_s: float = 30.0
    """ENGINE_PLUGINS_ABORT_TIMEOUT_S: default ``timeout_s`` of an abort or pause that waits."""
    abort_on_weight_version: bool = False
    """ENGINE_PLUGINS_ABORT_ON_WEIGHT_VERSION: default of ``abort_all_requests`` in /update_weight_version."""
    plugins: Optional[frozenset[str]] = None
    """ENGINE_PLUGINS_PLUGINS: comma-separated allowlist of third-party plugins (entry-point names) to load; unset loads all."""
    replace_native_routes: bool = True
    """ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES: replace an engine route with the same path and method (default true)."""
    trace: bool = False
    """ENGINE_PLUGINS_TRACE: log every hook call, which plugin answered, and how long it took (default false)."""
    max_body_bytes: int = 16 * 1024 * 1024
    """ENGINE_PLUGINS_MAX_BODY_BYTES: the largest request body a contract route reads (default 16 MiB)."""
    require_key: bool = False
    """ENGINE_PLUGINS_REQUIRE_KEY: refuse to start without an API key (the engine's or ENGINE_PLUGINS_API_KEY);
    by default a keyless server serves and says so in its startup log."""
    abort_settle_s: float = 5.0
    """ENGINE_PLUGINS_ABORT_SETTLE_S: how long an abort sent without ``wait`` (the engines' own abort
    routes, and ``/abort_requests`` without the field) waits for the requests it covered to be
    released before it answers (default 5 s)."""
    scope_prefix_cache: bool = True
    """ENGINE_PLUGINS_SCOPE_PREFIX_CACHE: key every request's prefix cache by the weight version it was
    admitted under, so that no request reuses KV computed under other weights (default true)."""
    exact_token_versions: bool = True
    """ENGINE_PLUGINS_EXACT_TOKEN_VERSIONS: SGLang before 0.5.19, where the plugin labels each token's
    weight version as its output arrives: have the scheduler send a non-streaming request's every
    token, so that each label is exact (default true); false keeps SGLang's one output per 50 tokens."""
    attach_in_process: bool = True
    """ENGINE_PLUGINS_ATTACH_IN_PROCESS: attach the contract to every vLLM ``AsyncLLM`` built in a process
    where vLLM loaded the general plugin, so that a framework holding it in-process gets the contract's
    pause, resume, abort and version bumps through vLLM's own methods (default true)."""


_PARSERS: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "route_prefix": ("ENGINE_PLUGINS_ROUTE_PREFIX", _route_prefix),
    "api_key": ("ENGINE_PLUGINS_API_KEY", _optional_text),
    "abort_timeout_s": ("ENGINE_PLUGINS_ABORT_TIMEOUT_S", _positive_seconds),
    "abort_on_weight_version": ("ENGINE_PLUGINS_ABORT_ON_WEIGHT_VERSION", _bool),
    "plugins": ("ENGINE_PLUGINS_PLUGINS", _name_list),
    "replace_native_routes": ("ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES", _bool),
    "trace": ("ENGINE_PLUGINS_TRACE", _bool),
    "max_body_bytes": ("ENGINE_PLUGINS_MAX_BODY_BYTES", _positive_bytes),
    "require_key": ("ENGINE_PLUGINS_REQUIRE_KEY", _bool),
    "abort_settle_s": ("ENGINE_PLUGINS_ABORT_SETTLE_S", _positive_seconds),
    "scope_prefix_cache": ("ENGINE_PLUGINS_SCOPE_PREFIX_CACHE", _bool),
    "exact_token_versions": ("ENGINE_PLUGINS_EXACT_TOKEN_VERSIONS", _bool),
    "attach_in_process": ("ENGINE_PLUGINS_ATTACH_IN_PROCESS", _bool),
}
assert set(_PARSERS) == {f.name for f in fields(Settings)}

ENV_VARS: tuple[str, ...] = tuple(var for var, _ in _PARSERS.values())

# Each variable's row in the docs' configuration table (docs/configuration.md, written from this
# and the defaults of Settings by `python -m tools.docs_tables`), in the users' words.
MEANINGS: dict[str, str] = {
    "ENGINE_PLUGINS_ROUTE_PREFIX": "path prefix of every contract route, e.g. `/rl`",
    "ENGINE_PLUGINS_API_KEY": "bearer key of the contract routes on an engine started without a key of its own (an engine key takes precedence)",
    "ENGINE_PLUGINS_ABORT_TIMEOUT_S": "default `timeout_s` of an abort with `wait`, and how long `/pause?mode=abort` and `?mode=wait` wait",
    "ENGINE_PLUGINS_ABORT_ON_WEIGHT_VERSION": "default `abort_all_requests` of `/update_weight_version`",
    "ENGINE_PLUGINS_PLUGINS": "comma-separated allowlist of third-party plugins (entry-point names in the group `engine_plugins`); unset, all of them load",
    "ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES": "replace an engine route with the same path and method (`/v1/loads`, `/update_weight_version`, vLLM's dev-mode routes)",
    "ENGINE_PLUGINS_TRACE": "log every hook call: which plugin was called, whether it answered or deferred, and how long it took",
    "ENGINE_PLUGINS_MAX_BODY_BYTES": "the largest request body a contract route reads; a larger one is a 413 naming the limit (`/abort_requests` also takes at most 100,000 `request_ids`)",
    "ENGINE_PLUGINS_REQUIRE_KEY": "refuse to start without an API key (the engine's or `ENGINE_PLUGINS_API_KEY`); by default a keyless server serves and says so in its startup log",
    "ENGINE_PLUGINS_ABORT_SETTLE_S": "how long an abort sent without `wait` (`/abort_requests` without the field, as vLLM's callers send it; SGLang's own `/abort_request`) waits for the requests it covered to be released before it answers",
    "ENGINE_PLUGINS_SCOPE_PREFIX_CACHE": "salt every request's prefix cache with the weight version it was admitted under, so that no request reuses KV computed before a bump",
    "ENGINE_PLUGINS_EXACT_TOKEN_VERSIONS": "SGLang before 0.5.19 only, where the plugin labels each token's weight version as it reaches the API process: have the scheduler send a non-streaming request's every token, so that every label is exact. `false` keeps SGLang's one output per 50 tokens and the throughput that costs (14-16% on the CPU model, figure 10 of docs/benchmarks.md); a native non-streaming answer's `weight_versions` may then put up to 49 tokens made before a version change under the new version (the contract's `/partial_generate` streams, and stays exact)",
    "ENGINE_PLUGINS_ATTACH_IN_PROCESS": "vLLM: attach the contract to every `AsyncLLM` built in a process where vLLM loaded the general plugin (an engine a framework holds in-process), so that its own `pause_generation`, `resume_generation`, `abort`, `update_weight_version` and `collective_rpc(\"reload_weights\")` go through the contract ([In-process AsyncLLM](vllm.md#in-process-asyncllm)); `false` leaves it to an explicit `engine_plugins.inprocess.attach(llm)`",
}
assert set(MEANINGS) == set(ENV_VARS)

def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read every ``ENGINE_PLUGINS_*`` variable from *environ* (default ``os.environ``).

    Unset variables take their defaults. Raises :class:`ConfigError` naming the variable for a
    bad value, and for an unknown ``ENGINE_PLUGINS_*`` name (most often a typo that would
    otherwise be ignored silently).
    """
    environ = os.environ if environ is None else environ
    unknown = sorted(k for k in environ if k.startswith("ENGINE_PLUGINS_") and k not in ENV_VARS)
    if unknown:
        raise ConfigError(f"unknown variable {unknown[0]}: known ones are {', '.join(ENV_VARS)}")
    values = {}
    for field_name, (var, parse) in _PARSERS.items():
        if var in environ:
            values[field_name] = parse(var, environ[var])
    return Settings(**values)


def describe(settings: Settings) -> dict[str, object]:
    """The effective configuration as ``{VARIABLE: value}``, with the API key masked."""
    out: dict[str, object] = {}
    for field_name, (var, _) in _PARSERS.items():
        value = getattr(settings, field_name)
        if field_name == "api_key" and value:
            value = "***"
        if isinstance(value, frozenset):
            value = sorted(value)
        out[var] = value
    return out
