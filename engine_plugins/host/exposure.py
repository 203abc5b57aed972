"""The key policy of the control routes, applied at startup.

The contract's routes abort, pause and re-version a whole server. Guarded by no key on an
address other than loopback, any host that reaches the port can stop a training run's rollouts.
RL clusters often run keyless on a private network, so a server without a key keeps serving and
says so in its startup log (:func:`key_policy`): a warning on a network address, a note on
loopback. ``ENGINE_PLUGINS_REQUIRE_KEY=1`` turns that into a refusal to start.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Iterable, Optional

from engine_plugins.contract.errors import StartupError

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def is_loopback(host: Optional[str]) -> bool:
    """Whether a server bound to *host* is reachable from this machine only.

    An empty host, ``0.0.0.0`` and ``::`` bind every interface. A host name other than the usual
    loopback names is not resolved (that would be a lookup at startup) and counts as reachable.
    """
    if not host:
        return False
    name = host.strip().strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def unguarded_warning(host: Optional[str], keys: Iterable[Optional[str]]) -> Optional[str]:
    """The warning to log when the control routes need no key on a non-loopback *host*, else None."""
    if any(keys) or is_loopback(host):
        return None
    shown = host or "every interface"
    return (
        f"engine_plugins: the RL control routes (abort, pause, update_weight_version, ...) are served "
        f"on {shown} without an API key: anyone who reaches this port can abort or pause every request. "
        "Set ENGINE_PLUGINS_API_KEY, or the engine's --api-key, or bind to 127.0.0.1."
    )


def key_policy(host: Optional[str], keys: Iterable[Optional[str]], require_key: bool) -> Optional[tuple[int, str]]:
    """The startup log line about the control routes' key, as ``(level, message)``; None when a
    key guards them. Raises :class:`StartupError` naming ``ENGINE_PLUGINS_REQUIRE_KEY`` when it
    is set and the server has no key."""
    keys = [k for k in keys if k]
    if keys:
        return None
    if require_key:
        raise StartupError(
            "engine_plugins: ENGINE_PLUGINS_REQUIRE_KEY is set but this server has no API key: set "
            "ENGINE_PLUGINS_API_KEY or the engine's --api-key, or unset ENGINE_PLUGINS_REQUIRE_KEY"
        )
    warning = unguarded_warning(host, keys)
    if warning is not None:
        return logging.WARNING, warning
    return logging.INFO, (
        f"engine_plugins: the RL control routes are served without an API key, on {host} (loopback) only; "
        "set ENGINE_PLUGINS_REQUIRE_KEY=1 to refuse to start without one"
    )


class RedactSecrets(logging.Filter):
    """A logging filter that masks *secrets* in the records of the logger it is added to (for an
    engine that logs its own API keys at startup)."""

    def __init__(self, secrets: Iterable[Optional[str]]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask every secret in the formatted message; the record is always kept."""
        message = record.getMessage()
        masked = message
        for secret in self.secrets:
            masked = masked.replace(secret, "***")
        if masked != message:
            record.msg, record.args = masked, ()
        return True
