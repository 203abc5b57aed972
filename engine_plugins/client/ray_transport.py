"""Contract calls to an engine held in a Ray actor, sent through the actor's handle.

The actor answers with :class:`engine_plugins.inprocess.ContractActor`'s method
``engine_plugins_http``; this transport sends each call as
``await handle.engine_plugins_http.remote(method, path, body, params, headers)`` (Ray carries it:
no socket, no RPC of this package's own) and reads the ``(status, reason, body)`` answer exactly
as :class:`~.transport.Transport` reads an HTTP answer, so the operations, the detection and the
fleets work unchanged over either.

Ray is imported here only, and only when a Ray-specific thing is needed (its exceptions, its
cancel): the client imports without Ray, and a handle that is not Ray's (a test's) works too.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Optional

from engine_plugins.client.errors import ServerError
from engine_plugins.client.http1 import Reply
from engine_plugins.client.transport import DEFAULT_TIMEOUT_S, RetriedCalls, client_headers

METHOD = "engine_plugins_http"
"""The actor method every call goes through (``engine_plugins.inprocess.ray_actor.METHOD``)."""

SCHEME = "ray://"


def is_actor_handle(target: Any) -> bool:
    """Whether *target* is an actor handle to send through (anything but a URL string)."""
    return not isinstance(target, (str, bytes))


def actor_label(handle: Any) -> str:
    """The server's name in results: ``ray://<actor name>``, else ``ray://<actor id>``."""
    actor_id = getattr(handle, "_actor_id", None)  # Ray's ActorHandle (a property, no remote call)
    if actor_id is None:
        return f"{SCHEME}{type(handle).__name__}-{id(handle):x}"
    hex_id = actor_id.hex()
    name = _actor_name(hex_id)
    return f"{SCHEME}{name or hex_id}"


def _actor_name(hex_id: str) -> Optional[str]:
    # A handle does not carry its actor's name; the GCS has it. ray.util.state would ask the
    # dashboard, which the frameworks' clusters often run without; ray._private.state asks the GCS
    # directly. Private, so any failure falls back to the id.
    try:
        from ray._private import state

        return state.actors(actor_id=hex_id).get("Name") or None
    except Exception:  # noqa: BLE001 - no Ray, not connected, or the private API changed
        return None


def _query(params: Optional[dict]) -> Optional[dict[str, Any]]:
    """*params* as httpx writes them on the actor's side: true/false for booleans, None left out."""
    if not params:
        return None
    out: dict[str, Any] = {}
    for name, value in params.items():
        if value is None:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        out[str(name)] = [("true" if v is True else "false" if v is False else str(v)) for v in values]
    return out


class RayTransport(RetriedCalls):
    """JSON to one engine in a Ray actor, through its handle: the :class:`~.transport.Transport`
    interface (``url``, :meth:`call`), with ``url`` the server's name (``ray://...``).

    No API key is sent: holding the handle is the credential (the actor adds the key its
    settings name, if any, itself).
    """

    def __init__(self, handle: Any, name: Optional[str] = None) -> None:
        try:
            self._method = getattr(handle, METHOD)
        except AttributeError:
            raise TypeError(
                f"{handle!r} has no method {METHOD}: add engine_plugins.inprocess.ContractActor to the actor's class "
                "(or use engine_plugins.inprocess.with_contract)"
            ) from None
        self.handle = handle
        self.url = name or actor_label(handle)
        self._headers = client_headers(None)

    async def _send(self, method: str, path: str, body: Any, params: Optional[dict], timeout_s: Optional[float]) -> Reply:
        where = f"{method} {path}"
        timeout = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = dict(self._headers)
        if content is not None:
            headers["Content-Type"] = "application/json"
        errors = _ray_errors()
        try:
            ref = self._method.remote(method, path, content, _query(params), headers)
        except errors.unreachable as exc:
            raise ServerError(self.url, "unreachable", f"{where}: the actor is gone ({_reason(exc)})") from None
        try:
            status, reason, answer = await asyncio.wait_for(_awaited(ref), max(timeout, 0.0))
        except asyncio.TimeoutError:
            _cancel(ref)
            raise ServerError(self.url, "timeout", f"{where}: no answer within {timeout:.3g} s") from None
        except asyncio.CancelledError:
            _cancel(ref)  # the caller gave up (a rollout cancelled): the actor's request ends too
            raise
        except errors.disconnected as exc:
            raise ServerError(self.url, "disconnected", f"{where}: the actor restarted mid-call ({_reason(exc)})") from None
        except errors.unreachable as exc:
            raise ServerError(self.url, "unreachable", f"{where}: the actor is gone ({_reason(exc)}); is it running?") from None
        except errors.cancelled:
            raise ServerError(self.url, "disconnected", f"{where}: the call was cancelled in the actor") from None
        except errors.raised as exc:
            # The contract's app answers its own failures with a status; a raise is the actor's
            # (no engine found, one no adapter takes): it does not serve the contract.
            raise ServerError(self.url, "unsupported", f"{where}: the actor's {METHOD} raised: {_reason(exc, last=True)}") from None
        return Reply(int(status), str(reason), bytes(answer))


async def _awaited(ref: Any) -> Any:
    # An ObjectRef is awaitable but not a coroutine: wait_for wants one it can cancel.
    return await ref


class _Errors:
    """Ray's exception classes the transport reads, or none when Ray is not installed."""

    def __init__(self) -> None:
        try:
            from ray import exceptions
        except ImportError:
            self.unreachable = self.disconnected = self.cancelled = self.raised = ()
            return
        unavailable = getattr(exceptions, "ActorUnavailableError", None)  # Ray 2.30 on
        # Checked in this order: a temporarily unavailable actor is a RayActorError too.
        self.disconnected = (unavailable,) if unavailable is not None else ()
        self.unreachable = (exceptions.RayActorError,)
        self.cancelled = (exceptions.TaskCancelledError,)
        self.raised = (exceptions.RayTaskError,)


_ERRORS: Optional[_Errors] = None


def _ray_errors() -> _Errors:
    global _ERRORS
    if _ERRORS is None:
        _ERRORS = _Errors()
    return _ERRORS


def _cancel(ref: Any) -> None:
    """Cancel a Ray call that is no longer awaited (best effort: Ray's ObjectRef only)."""
    try:
        import ray
    except ImportError:
        cancel = getattr(ref, "cancel", None)  # a test's handle hands back a task
        if callable(cancel):
            cancel()
        return
    if isinstance(ref, ray.ObjectRef):
        try:
            ray.cancel(ref)  # an async actor's coroutine gets CancelledError: the request is aborted
        except Exception:  # noqa: BLE001 - already finished, or the actor is gone
            pass
    elif callable(getattr(ref, "cancel", None)):
        ref.cancel()


def _reason(exc: BaseException, last: bool = False) -> str:
    # Ray's messages run over many lines: an actor's death says what happened first, a task's
    # error ends with the exception raised in the actor.
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return (lines[-1] if last else lines[0]) if lines else type(exc).__name__
