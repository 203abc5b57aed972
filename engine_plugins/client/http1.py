"""A small HTTP/1.1 client for the control calls: kept-alive connections per server, one timeout
per call, on plain asyncio protocols.

A fleet sends one small JSON call to each of hundreds of servers at every step boundary; through
httpx (its client, httpcore's pool, anyio's streams) each call cost the client about a millisecond
of CPU, most of it in layers a JSON call to a known server does not need. Here a call is one write
on a kept-alive connection, its request head made once per server and path. h11 (the HTTP/1.1
state machine httpx itself uses) frames the requests, reads the answers (``Content-Length``,
chunked, or a body up to the close) and says when a connection may carry another call; TLS for
``https`` URLs.

Failures are this module's three exceptions, which :mod:`.transport` turns into
:class:`~.errors.ServerError`: :class:`Unreachable`, :class:`TimedOut`, :class:`Lost`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional
from urllib.parse import quote, urlencode, urlsplit

import h11

CONNECT_TIMEOUT_S = 10.0
MAX_REQUESTS_KEPT = 64


class Unreachable(Exception):
    """No connection could be made (refused, no route, name not found, TLS refused)."""


class TimedOut(Exception):
    """No whole answer within the call's timeout (``connecting`` true: not even a connection)."""

    def __init__(self, connecting: bool = False) -> None:
        super().__init__("connecting" if connecting else "waiting for the answer")
        self.connecting = connecting


class Lost(Exception):
    """The connection closed before the whole answer arrived."""


class Reply(NamedTuple):
    """A whole HTTP answer: status, reason phrase and body bytes."""

    status: int
    reason: str
    body: bytes

    @property
    def text(self) -> str:
        """The body as text (UTF-8, bad bytes replaced)."""
        return self.body.decode("utf-8", "replace")


@dataclass(frozen=True)
class Origin:
    """Where one base URL's calls go: the address, the TLS context, and the request heads (the
    fixed headers made once; each call's h11 request made once per method, path and length)."""

    key: tuple[str, str, int]
    host: str
    port: int
    tls: Optional[ssl.SSLContext]
    prefix: str
    """The base URL's path (a route prefix such as ``/rl``), put before every call's path."""
    fixed_headers: tuple[tuple[bytes, bytes], ...]
    """``Host`` and the client's own headers."""
    requests: dict[tuple[str, str, int], h11.Request] = field(default_factory=dict, compare=False)
    """h11's request per (method, target, body length or -1), reused: h11 checks its headers once."""

    def request(self, method: str, target: str, length: int) -> h11.Request:
        """The request head for one call (*length* -1: no body)."""
        key = (method, target, length)
        request = self.requests.get(key)
        if request is None:
            if len(self.requests) >= MAX_REQUESTS_KEPT:
                self.requests.clear()  # targets with ever-new queries: do not keep them all
            headers = list(self.fixed_headers)
            if length >= 0:
                headers += [(b"Content-Type", b"application/json"), (b"Content-Length", b"%d" % length)]
            elif method in ("POST", "PUT", "PATCH"):
                headers.append((b"Content-Length", b"0"))
            request = self.requests[key] = h11.Request(method=method, target=target, headers=headers)
        return request


class _Connection(asyncio.Protocol):
    """One kept-alive connection: at most one call on it at a time. h11 frames the requests
    and reads the answers (length, chunked or up to the close) and says when it may be reused."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: Optional[asyncio.Transport] = None
        self.h11 = h11.Connection(h11.CLIENT)
        self.waiter: Optional[asyncio.Future] = None
        self.status = 0
        self.reason = b""
        self.body: list[bytes] = []
        self.closed = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # A control call is one small write: send it now, not after the previous one's ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done():
            self.close()  # bytes nobody asked for: the connection cannot be trusted any more
            return
        self.h11.receive_data(data)
        self._read()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.h11.receive_data(b"")  # the close may end an answer without a length
            self._read()
            if not self.waiter.done():
                self.waiter.set_exception(Lost(str(exc) if exc else "the server closed the connection"))

    def _read(self) -> None:
        """Take h11's events for the answer so far; the waiter gets the reply once it is whole."""
        waiter = self.waiter
        assert waiter is not None
        try:
            while True:
                event = self.h11.next_event()
                if event is h11.NEED_DATA:
                    return
                kind = type(event)
                if kind is h11.Data:
                    self.body.append(event.data)
                elif kind is h11.Response:
                    self.status, self.reason = event.status_code, event.reason
                elif kind is h11.EndOfMessage:
                    waiter.set_result(Reply(self.status, self.reason.decode("latin-1"), b"".join(self.body)))
                    return
                elif kind is h11.InformationalResponse:
                    continue  # an interim answer (100 Continue): the real one follows
                else:  # ConnectionClosed before the answer: connection_lost says so
                    return
        except h11.RemoteProtocolError as exc:
            if not self.closed:  # after the close, connection_lost says the answer was cut short
                waiter.set_exception(Lost(f"a malformed answer ({exc})"))
                self.close()

    def send(self, request: h11.Request, body: Optional[bytes]) -> asyncio.Future:
        """Write *request* (and *body*); a future of its :class:`Reply`."""
        self.status, self.reason, self.body = 0, b"", []
        self.waiter = self.loop.create_future()
        data = self.h11.send(request)
        if body:
            data += self.h11.send(h11.Data(data=body))
        data += self.h11.send(h11.EndOfMessage())
        assert self.transport is not None
        self.transport.write(data)
        return self.waiter

    def reuse(self) -> bool:
        """Make ready for another call if h11 allows one after the last (both sides done, keep-alive
        on both, no bytes past the answer); false when the connection must be closed."""
        connection = self.h11
        if self.closed or connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
            return False
        if connection.trailing_data[0]:
            return False  # bytes after the answer: the connection cannot be trusted with another call
        connection.start_next_cycle()
        return True

    def close(self) -> None:
        """Close now (an unfinished call on it fails as lost)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Http1Client:
    """Kept-alive HTTP/1.1 connections to any number of servers, for small JSON calls:
    ``await client.request(client.origin(url), "POST", "/abort_requests", body, timeout_s)``.

    *headers* go on every call (the bearer key); an idle connection is reused within
    *keepalive_expiry_s* and then closed; at most *max_connections_per_server* calls to one
    server are under way at once (the others wait their turn, within their own timeout);
    *tls* makes the context for ``https`` URLs. Belongs to the event loop that uses it.
    """

    def __init__(
        self,
        headers: Optional[dict[str, str]] = None,
        keepalive_expiry_s: float = 2.0,
        tls: Optional[Callable[[], ssl.SSLContext]] = None,
        max_connections_per_server: int = 256,
    ) -> None:
        self.headers = {"Accept": "*/*", "User-Agent": "engine-plugins", **(headers or {})}
        self.keepalive_expiry_s = keepalive_expiry_s
        self.max_connections_per_server = max_connections_per_server
        self._tls = tls or ssl.create_default_context
        self._turns: dict[tuple[str, str, int], asyncio.Semaphore] = {}
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self.is_closed = False

    def origin(self, url: str) -> Origin:
        """The fixed part of every call to *url* (a base URL, possibly with a route prefix)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        default_port = parts.port is None or port == (443 if parts.scheme == "https" else 80)
        host = parts.hostname
        host_header = (f"[{host}]" if ":" in host else host) + ("" if default_port else f":{port}")
        fixed = [("Host", host_header), *self.headers.items()]
        return Origin((parts.scheme, host, port), host, port, self._tls() if parts.scheme == "https" else None,
                      parts.path.rstrip("/"), tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in fixed))

    async def request(self, origin: Origin, method: str, path: str, body: Optional[bytes], timeout_s: Optional[float],
                      query: str = "") -> Reply:
        """Send one call and return its whole answer, all within *timeout_s* (None: no limit).

        Raises :class:`Unreachable`, :class:`TimedOut` or :class:`Lost`.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        turns = self._turns.get(origin.key)
        if turns is None:
            turns = self._turns[origin.key] = asyncio.Semaphore(self.max_connections_per_server)
        if turns.locked():  # so many calls to this server already: wait for one to end
            try:
                await asyncio.wait_for(turns.acquire(), timeout_s)
            except asyncio.TimeoutError:
                raise TimedOut(connecting=True) from None
        else:
            await turns.acquire()  # free: returns without waiting
        try:
            left = None if deadline is None else max(deadline - loop.time(), 0.0)
            return await self._call(origin, loop, method, path, body, deadline, left, query)
        finally:
            turns.release()

    async def _call(self, origin: Origin, loop: asyncio.AbstractEventLoop, method: str, path: str, body: Optional[bytes],
                    deadline: Optional[float], timeout_s: Optional[float], query: str) -> Reply:
        connection = self._take(origin, loop)
        if connection is None:
            connection = await self._connect(origin, loop, CONNECT_TIMEOUT_S if timeout_s is None else min(timeout_s, CONNECT_TIMEOUT_S))
        target = quote(origin.prefix + path, safe="/:@!$&'()*+,;=-._~%") + ("?" + query if query else "")
        waiter = connection.send(origin.request(method, target, -1 if body is None else len(body)), body)
        timer = loop.call_at(deadline, _expire, waiter) if deadline is not None else None
        try:
            reply = await waiter
        except BaseException:
            connection.close()  # a call cut short leaves the connection mid-answer
            self._open.discard(connection)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if connection.reuse():
            connection.idle_since = loop.time()
            self._idle.setdefault(origin.key, []).append(connection)
        else:
            connection.close()
            self._open.discard(connection)
        return reply

    def _take(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> Optional[_Connection]:
        """The most recently used idle connection to *origin* that may still be used; expired
        ones are closed (the server may be closing them)."""
        idle = self._idle.get(origin.key)
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.loop is loop and loop.time() - connection.idle_since < self.keepalive_expiry_s:
                return connection
            connection.close()
            self._open.discard(connection)
        return None

    async def _connect(self, origin: Origin, loop: asyncio.AbstractEventLoop, timeout_s: float) -> _Connection:
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(loop), origin.host, origin.port, ssl=origin.tls,
                                       server_hostname=origin.host if origin.tls else None),
                timeout_s,
            )
        except asyncio.TimeoutError:
            raise TimedOut(connecting=True) from None
        except (OSError, ssl.SSLError) as exc:
            raise Unreachable(_reason(exc)) from None
        self._open.add(connection)
        return connection

    async def aclose(self) -> None:
        """Close every connection (the client can still make new ones)."""
        self.is_closed = True
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle.clear()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(TimedOut())


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def encode_query(params: Optional[dict[str, Any]]) -> str:
    """A query string from *params* the way httpx writes one: true/false for booleans, nothing for
    None, a repeated name for a list."""
    if not params:
        return ""
    pairs = []
    for name, value in params.items():
        for one in value if isinstance(value, (list, tuple)) else [value]:
            text = "true" if one is True else "false" if one is False else "" if one is None else str(one)
            pairs.append((str(name), text))
    return urlencode(pairs)
