"""The client's own HTTP/1.1 client (engine_plugins/client/http1.py) against small asyncio servers
that answer the ways real servers do: kept-alive, chunked, up to the close, late, or never."""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from engine_plugins.client.http1 import Http1Client, Lost, TimedOut, Unreachable, encode_query

pytestmark = pytest.mark.anyio

Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def server(handle: Handler) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A loopback server calling *handle(request_head, writer)* for each request on each
    connection; yields its URL and the heads it received, one connection after another."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
                await reader.readexactly(length)
                heads.append(head)
                await handle(head, writer)
                if writer.is_closing():
                    return
        writer.close()

    listener = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", heads
    finally:
        listener.close()


def answer(body: bytes) -> Handler:
    """Answer every request 200 with *body* (Content-Length framing)."""
    async def handle(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    return handle


async def test_a_kept_alive_connection_carries_the_next_call_and_the_head_is_complete():
    opened: list[int] = []
    async with server(answer(b'{"ok":true}')) as (url, heads):
        client = Http1Client({"Authorization": "Bearer k"})
        origin = client.origin(url + "/rl")
        first = await client.request(origin, "POST", "/abort_requests", b'{"wait":true}', 5.0)
        second = await client.request(origin, "GET", "/v1/loads", None, 5.0, query=encode_query({"include": "all"}))
        opened.append(len(client._open))
        await client.aclose()
    assert first.status == 200 and first.body == b'{"ok":true}' and second.body == first.body
    assert opened == [1], "both calls on one connection"
    assert heads[0].startswith(b"POST /rl/abort_requests HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in heads[0] and b"\r\nContent-Length: 13\r\n" in heads[0]
    assert heads[1].startswith(b"GET /rl/v1/loads?include=all HTTP/1.1\r\n") and b"Content-Length" not in heads[1]


async def test_a_chunked_answer_with_a_trailer_is_read_whole_in_pieces():
    async def chunked(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{\"a\":")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b"\r\n2;ext=1\r\n12\r\n1\r\n}\r\n0\r\nx-trailer: 1\r\n\r\n")

    async with server(chunked) as (url, _):
        client = Http1Client()
        origin = client.origin(url)
        replies = [await client.request(origin, "GET", "/x", None, 5.0) for _ in range(2)]
        connections = len(client._open)
        await client.aclose()
    assert [r.body for r in replies] == [b'{"a":12}'] * 2 and connections == 1


async def test_an_answer_without_a_length_ends_at_the_close_and_its_connection_is_not_reused():
    async def until_close(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 500 Internal Server Error\r\n\r\nengine died")
        await writer.drain()
        writer.close()

    async with server(until_close) as (url, heads):
        client = Http1Client()
        origin = client.origin(url)
        replies = [await client.request(origin, "POST", "/pause", None, 5.0) for _ in range(2)]
        await client.aclose()
    assert [(r.status, r.reason, r.text) for r in replies] == [(500, "Internal Server Error", "engine died")] * 2
    assert len(heads) == 2 and b"Content-Length: 0" in heads[0]


async def test_no_answer_in_time_is_timed_out_and_the_connection_is_dropped():
    async def late(head: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.5)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")

    async with server(late) as (url, _):
        client = Http1Client()
        origin = client.origin(url)
        with pytest.raises(TimedOut):
            await client.request(origin, "GET", "/slow", None, 0.1)
        assert not client._open, "a connection mid-answer is never reused"
        assert (await client.request(origin, "GET", "/slow", None, 5.0)).body == b"{}"
        await client.aclose()


async def test_a_refused_connection_is_unreachable_and_a_hang_up_is_lost():
    async with server(answer(b"")) as (url, _):
        pass  # closed: nothing listens on its port any more
    client = Http1Client()
    with pytest.raises(Unreachable):
        await client.request(client.origin(url), "GET", "/", None, 5.0)

    async def hang_up(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async with server(hang_up) as (url, _):
        with pytest.raises(Lost):
            await client.request(client.origin(url), "GET", "/", None, 5.0)
    await client.aclose()


async def test_an_idle_connection_past_its_expiry_is_closed_not_reused():
    async with server(answer(b"{}")) as (url, _):
        client = Http1Client(keepalive_expiry_s=0.05)
        origin = client.origin(url)
        await client.request(origin, "GET", "/", None, 5.0)
        [first] = client._open
        await asyncio.sleep(0.1)
        await client.request(origin, "GET", "/", None, 5.0)
        [second] = client._open
        await client.aclose()
    assert first is not second and first.closed


async def test_extra_bytes_after_an_answer_make_its_connection_untrusted():
    async with server(answer(b"{}")) as (url, _):
        client = Http1Client()
        origin = client.origin(url)

        async def and_more(head: bytes, writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}HTTP/1.1 200 OK")

        async with server(and_more) as (other, _):
            other_origin = client.origin(other)
            assert (await client.request(other_origin, "GET", "/", None, 5.0)).body == b"{}"
            assert not client._idle.get(other_origin.key)
        assert (await client.request(origin, "GET", "/", None, 5.0)).body == b"{}"
        assert client._idle[origin.key]
        await client.aclose()


def test_query_strings_are_written_as_httpx_writes_them():
    params = {"mode": "abort", "clear_cache": False, "wait": True, "ids": ["a b", "c&d"], "none": None, "n": 3}
    assert encode_query(params) == str(httpx.QueryParams(params))
    assert encode_query(None) == "" and encode_query({}) == ""


async def test_calls_beyond_the_limit_per_server_wait_their_turn_within_their_timeout():
    async def slow(head: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.2)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")

    async with server(slow) as (url, heads):
        client = Http1Client(max_connections_per_server=1)
        origin = client.origin(url)
        first = asyncio.ensure_future(client.request(origin, "GET", "/a", None, 5.0))
        await asyncio.sleep(0.05)
        with pytest.raises(TimedOut):
            await client.request(origin, "GET", "/b", None, 0.05)
        second = await client.request(origin, "GET", "/c", None, 5.0)
        assert (await first).body == second.body == b"{}"
        assert len(client._open) == 1, "the second call waited for the first's connection"
        await client.aclose()
    assert [h.split(b" ")[1] for h in heads] == [b"/a", b"/c"]


async def test_an_interim_answer_is_skipped_and_a_malformed_one_is_lost():
    async def interim(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")

    async def garbage(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SPDY/9 what\r\n\r\n")

    client = Http1Client()
    async with server(interim) as (url, _):
        reply = await client.request(client.origin(url), "GET", "/", None, 5.0)
    assert (reply.status, reply.body) == (200, b"{}")
    [kept] = client._open
    async with server(garbage) as (url, _):
        with pytest.raises(Lost, match="malformed"):
            await client.request(client.origin(url), "GET", "/", None, 5.0)
        assert client._open == {kept}, "the malformed answer's connection is dropped"
    await client.aclose()
