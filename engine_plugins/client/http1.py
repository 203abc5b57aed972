"""A small HTTP/1.1 client for the control calls: kept-alive connections per server, one timeout
per call, on plain asyncio protocols.

A fleet sends one small JSON call to each of hundreds of servers at every step boundary; through
httpx (its client, httpcore's pool, anyio's streams, h11's state machine) each call cost the
client about a millisecond of CPU, most of it in layers a JSON call to a known server does not
need. Here a call is one write of bytes made once per server, and its answer is parsed as it
arrives. It speaks just what the engines' servers answer: ``Content-Length`` or chunked bodies
(or a body up to the close), kept-alive connections, TLS for ``https`` URLs.

Failures are this module's three exceptions, which :mod:`.transport` turns into
:class:`~.errors.ServerError`: :class:`Unreachable`, :class:`TimedOut`, :class:`Lost`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional
from urllib.parse import quote, urlencode, urlsplit

CONNECT_TIMEOUT_S = 10.0


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
    """Where one base URL's calls go: the address, the TLS context, and the request head's
    fixed part (made once, so a call only adds its method, path and length)."""

    key: tuple[str, str, int]
    host: str
    port: int
    tls: Optional[ssl.SSLContext]
    prefix: str
    """The base URL's path (a route prefix such as ``/rl``), put before every call's path."""
    fixed_head: bytes
    """``Host`` and the client's own headers, each line ending in CRLF."""


class _Answer:
    """Parses one answer as its bytes arrive; :meth:`feed` returns the :class:`Reply` once whole."""

    __slots__ = ("buffer", "status", "reason", "keep_alive", "length", "chunked", "body", "chunk_pos", "leftover")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.status = 0
        self.reason = ""
        self.keep_alive = True
        self.length: Optional[int] = None  # None: the body ends at the close
        self.chunked = False
        self.body = bytearray()
        self.chunk_pos = 0
        # Bytes after the answer: a connection that sent any cannot be trusted with another call.
        self.leftover = 0

    def feed(self, data: bytes) -> Optional[Reply]:
        """Take more bytes; the reply once it is whole."""
        self.buffer += data
        while not self.status:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return None
            head = bytes(self.buffer[:end]).decode("latin-1")
            del self.buffer[:end + 4]
            self._read_head(head)
        if self.chunked:
            return self._read_chunks()
        if self.length is not None and len(self.buffer) >= self.length:
            self.leftover = len(self.buffer) - self.length
            return Reply(self.status, self.reason, bytes(self.buffer[:self.length]))
        return None

    def _read_head(self, head: str) -> None:
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise Lost(f"not an HTTP answer: {lines[0][:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:
            return  # an interim answer (100 Continue): the real one follows
        self.status, self.reason = status, parts[2] if len(parts) > 2 else ""
        http11 = parts[0] == "HTTP/1.1"
        self.keep_alive = http11
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                self.length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                self.chunked = True
            elif name == "connection":
                token = value.strip().lower()
                self.keep_alive = token != "close" if http11 else token == "keep-alive"
        if status in (204, 304):
            self.length = 0
        if self.chunked:
            self.length = None
        elif self.length is None:
            self.keep_alive = False  # the body ends at the close

    def _read_chunks(self) -> Optional[Reply]:
        buffer = self.buffer
        while True:
            end = buffer.find(b"\r\n", self.chunk_pos)
            if end < 0:
                return None
            size = int(bytes(buffer[self.chunk_pos:end]).split(b";", 1)[0], 16)
            if size == 0:
                # Then the trailer: header lines (usually none), then an empty line.
                start = end + 2
                if buffer[start:start + 2] == b"\r\n":
                    done = start + 2
                else:
                    found = buffer.find(b"\r\n\r\n", start)
                    if found < 0:
                        return None
                    done = found + 4
                self.leftover = len(buffer) - done
                return Reply(self.status, self.reason, bytes(self.body))
            if len(buffer) < end + 2 + size + 2:
                return None
            self.body += buffer[end + 2:end + 2 + size]
            self.chunk_pos = end + 2 + size + 2

    def at_close(self) -> Optional[Reply]:
        """The reply when the connection's close ends it (a body without a length)."""
        if self.status and not self.chunked and self.length is None:
            return Reply(self.status, self.reason, bytes(self.buffer))
        return None


class _Connection(asyncio.Protocol):
    """One kept-alive connection: at most one call on it at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: Optional[asyncio.Transport] = None
        self.answer: Optional[_Answer] = None
        self.waiter: Optional[asyncio.Future] = None
        self.closed = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # A control call is one small write: send it now, not after the previous one's ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done() or self.answer is None:
            self.close()  # bytes nobody asked for: the connection cannot be trusted any more
            return
        try:
            reply = self.answer.feed(data)
        except (Lost, ValueError) as exc:
            self.waiter.set_exception(exc if isinstance(exc, Lost) else Lost(f"a malformed answer ({exc})"))
            self.close()
            return
        if reply is not None:
            self.waiter.set_result(reply)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            reply = self.answer.at_close() if self.answer is not None else None
            if reply is not None:
                self.waiter.set_result(reply)
            else:
                self.waiter.set_exception(Lost(str(exc) if exc else "the server closed the connection"))

    def send(self, request: bytes) -> asyncio.Future:
        """Write *request*; a future of its :class:`Reply`."""
        self.answer = _Answer()
        self.waiter = self.loop.create_future()
        assert self.transport is not None
        self.transport.write(request)
        return self.waiter

    def reusable(self) -> bool:
        """Another call may go on this connection: open, and the last answer allowed it."""
        answer = self.answer
        return not self.closed and answer is not None and answer.keep_alive and not answer.leftover

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
        fixed = f"Host: {host_header}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        return Origin((parts.scheme, host, port), host, port, self._tls() if parts.scheme == "https" else None,
                      parts.path.rstrip("/"), fixed.encode("latin-1"))

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
        head = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + origin.fixed_head
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        elif method in ("POST", "PUT", "PATCH"):
            head += b"Content-Length: 0\r\n\r\n"
        else:
            head += b"\r\n"
        waiter = connection.send(head + body if body is not None else head)
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
        if connection.reusable():
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
