"""HTTP calls to one server, with every transport failure turned into a :class:`ServerError`.

Each call takes its own timeout, so that callers working towards a deadline never wait past it.
The calls go through this package's own HTTP/1.1 client (:mod:`.http1`), cheap enough for a fleet
of hundreds of servers, or through an httpx client when the caller passes one.
"""

from __future__ import annotations

import functools
import json
import ssl
import time
from typing import Any, Optional, Union

import httpx

from engine_plugins.client.errors import ServerError
from engine_plugins.client.http1 import Http1Client, Lost, Reply, TimedOut, Unreachable, encode_query
from engine_plugins.contract.schema import CONTRACT_HEADER

# Below the engines' 5 s keep-alive timeout: reusing a connection the server is closing fails.
KEEPALIVE_EXPIRY_S = 2.0
DEFAULT_TIMEOUT_S = 30.0

HttpClient = Union[Http1Client, httpx.AsyncClient]
"""What a :class:`Transport` sends through: this package's HTTP/1.1 client, or an httpx client."""


@functools.lru_cache(maxsize=None)
def _tls_context() -> ssl.SSLContext:
    # httpx builds a context (and reads the CA bundle) per client, about 50 ms of CPU each; a
    # fleet makes a client per server, so they share one.
    return httpx.create_ssl_context()


def client_headers(api_key: Optional[str] = None) -> dict[str, str]:
    """The headers of every call: the bearer key (if any), and the contract's header, which asks
    an engine's own route that shares a contract path for the contract's fuller answer."""
    headers = {CONTRACT_HEADER: "1"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def make_http_client(api_key: Optional[str] = None, max_connections: int = 256) -> httpx.AsyncClient:
    """An httpx client with :func:`client_headers` and loopback-friendly connection limits."""
    headers = client_headers(api_key)
    return httpx.AsyncClient(
        headers=headers,
        verify=_tls_context(),
        timeout=httpx.Timeout(DEFAULT_TIMEOUT_S, connect=10.0),
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=KEEPALIVE_EXPIRY_S
        ),
    )


def make_control_client(api_key: Optional[str] = None) -> Http1Client:
    """This package's HTTP/1.1 client with :func:`client_headers`, for any number of servers."""
    headers = client_headers(api_key)
    return Http1Client(headers, keepalive_expiry_s=KEEPALIVE_EXPIRY_S, tls=_tls_context)


class HttpClientOwner:
    """Async-context lifecycle shared by the server and fleet clients: an HTTP client passed in
    is shared and left open; one made here (with *api_key*) is closed by :meth:`aclose`."""

    def __init__(self, api_key: Optional[str], http: Optional[HttpClient]) -> None:
        self._own_http = http is None
        self.http: HttpClient = http or make_control_client(api_key)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this object made it."""
        if self._own_http:
            await self.http.aclose()


class RetriedCalls:
    """A call that is sent once more when its connection (or actor) was lost on the way: what
    every transport's :meth:`call` does around its own ``_send``, which returns a
    :class:`~.http1.Reply` or raises :class:`ServerError`."""

    url: str

    async def _send(self, method: str, path: str, body: Any, params: Optional[dict], timeout_s: Optional[float]) -> Reply:
        raise NotImplementedError

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Optional[dict] = None,
        timeout_s: Optional[float] = None,
        expect_json: bool = True,
        idempotent: bool = True,
    ) -> Any:
        """Send one request; return the decoded JSON (None for an empty body).

        An *idempotent* call whose connection is lost is sent once more, within what is left of
        *timeout_s*: over HTTP, a kept-alive connection can be closed by the server (its
        keep-alive timer) just as a request goes out on it, and the request never reached the
        server; through Ray, the actor can restart mid-call. If that try fails too, the first
        error is raised.

        Raises :class:`ServerError` for a refused connection, a timeout, a connection lost
        mid-call, any status but 2xx (with the server's own message), or a body that is not JSON.
        """
        started = time.monotonic()
        try:
            reply = await self._send(method, path, body, params, timeout_s)
        except ServerError as lost:
            left = None if timeout_s is None else timeout_s - (time.monotonic() - started)
            if not idempotent or lost.kind != "disconnected" or (left is not None and left <= 0):
                raise
            try:
                reply = await self._send(method, path, body, params, left)
            except ServerError:
                raise lost from None
        return decode_reply(self.url, f"{method} {path}", reply, expect_json)


class Transport(RetriedCalls):
    """JSON over HTTP to one base URL (which may carry a route prefix, e.g. ``http://h:p/rl``)."""

    def __init__(self, url: str, http: HttpClient) -> None:
        self.url = url.rstrip("/")
        self.http = http
        self._origin = http.origin(self.url) if isinstance(http, Http1Client) else None

    async def _send(self, method: str, path: str, body: Any, params: Optional[dict], timeout_s: Optional[float]) -> Reply:
        if self._origin is None:
            return await self._send_httpx(method, path, body, params, timeout_s)
        where = f"{method} {path}"
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        try:
            return await self.http.request(self._origin, method, path, content, timeout_s, encode_query(params))  # type: ignore[union-attr]
        except Unreachable as exc:
            raise ServerError(self.url, "unreachable", f"cannot connect ({exc}); is the server running at {self.url}?") from None
        except TimedOut:
            raise ServerError(self.url, "timeout", f"{where}: no answer within {_seconds(timeout_s)} s") from None
        except Lost as exc:
            raise ServerError(self.url, "disconnected", f"{where}: the connection was lost mid-call ({exc})") from None

    async def _send_httpx(self, method: str, path: str, body: Any, params: Optional[dict], timeout_s: Optional[float]) -> Reply:
        where = f"{method} {path}"
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)) if timeout_s is not None else httpx.USE_CLIENT_DEFAULT
        try:
            response = await self.http.request(method, self.url + path, json=body, params=params, timeout=timeout)  # type: ignore[union-attr]
        except httpx.ConnectError as exc:
            raise ServerError(self.url, "unreachable", f"cannot connect ({_reason(exc)}); is the server running at {self.url}?") from None
        except httpx.TimeoutException:
            raise ServerError(self.url, "timeout", f"{where}: no answer within {_seconds(timeout_s)} s") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise ServerError(self.url, "disconnected", f"{where}: the connection was lost mid-call ({_reason(exc)})") from None
        except httpx.HTTPError as exc:
            raise ServerError(self.url, "unreachable", f"{where}: {type(exc).__name__}: {_reason(exc)}") from None
        return Reply(response.status_code, response.reason_phrase, response.content)


def _seconds(timeout_s: Optional[float]) -> str:
    return f"{timeout_s if timeout_s is not None else DEFAULT_TIMEOUT_S:.3g}"


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def decode_reply(url: str, where: str, response: Reply, expect_json: bool) -> Any:
    """*response*'s JSON (None for an empty body; its text unless *expect_json*), or the
    :class:`ServerError` its status says: 401/403 ``unauthorized``, 404 ``not_found``, any other
    non-2xx ``http`` with the server's own message; a body that is not JSON is ``protocol``.
    Every transport reads its answers here (:mod:`.ray_transport` too)."""
    status = response.status
    if status >= 300:
        detail = error_message(response)
        if status in (401, 403):
            raise ServerError(url, "unauthorized", f"{where} -> {status}: {detail} (pass --api-key or set ENGINE_PLUGINS_API_KEY)", status)
        if status == 404:
            raise ServerError(url, "not_found", f"{where} -> 404: this server has no such route", status)
        raise ServerError(url, "http", f"{where} -> {status}: {detail}", status)
    if not expect_json:
        return response.text
    if not response.body.strip():
        return None
    try:
        return json.loads(response.body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ServerError(url, "protocol", f"{where}: expected JSON, got {response.text[:80]!r}", status) from None


def error_message(response: Reply) -> str:
    """The server's own words for an error: the contract's ``error.message``, vLLM's ``error``,
    FastAPI's ``detail``, SGLang's ``message``, or the start of the body."""
    try:
        body = json.loads(response.body)
    except ValueError:
        return response.text[:200].strip() or response.reason
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        for key in ("error", "detail", "message"):
            if body.get(key):
                return str(body[key])
    return str(body)[:200]
