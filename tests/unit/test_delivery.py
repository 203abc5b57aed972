"""Answer delivery: a wait for released requests ends only once their HTTP answers are written,
through every middleware, and never later than its bound."""

import asyncio

import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response

from engine_plugins.core.delivery import DeliveryMiddleware, install_outermost
from engine_plugins.core.registry import InFlightRegistry

pytestmark = pytest.mark.anyio


def http_scope(path: str = "/") -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}


async def receive() -> dict:
    return {"type": "http.request", "body": b"", "more_body": False}


async def steps(n: int = 20) -> None:
    """Let the event loop run every ready task a few times over."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_the_wait_ends_after_the_answers_last_chunk_not_at_the_release():
    registry = InFlightRegistry()
    answer_now = asyncio.Event()
    order: list[str] = []

    made: dict = {}

    async def app(scope, receive, send):
        made["entry"] = registry.add("r1")
        registry.release("r1")  # the engine is done with it; the answer is not written yet
        await answer_now.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def send(message):
        order.append(message["type"] + ("+" if message.get("more_body") else ""))

    served = asyncio.ensure_future(DeliveryMiddleware(app)(http_scope(), receive, send))
    await steps()
    waiter = asyncio.ensure_future(registry.wait_released([made["entry"]], timeout_s=30))
    await steps()
    assert not waiter.done(), "the wait ended before the answer was written"
    answer_now.set()
    assert await waiter is True
    order.append("waited")
    await served
    assert order == ["http.response.start", "http.response.body+", "http.response.body", "waited"]
    assert not registry._answering, "a written answer leaves the registry's list"


async def test_a_client_that_never_gets_its_answer_holds_the_wait_only_to_its_bound():
    registry = InFlightRegistry()
    never = asyncio.Event()

    async def app(scope, receive, send):
        registry.add("r1")
        registry.release("r1")
        await never.wait()  # the answer never goes out (a client that stopped reading)

    served = asyncio.ensure_future(DeliveryMiddleware(app)(http_scope(), receive, lambda m: None))
    await steps()
    [delivery] = registry._answering
    assert await registry.wait_released([], timeout_s=30, everything=True, delivery_bound_s=0.05) is True
    assert not delivery.delivered.is_set(), "the wait ended by its bound, not by the answer"
    served.cancel()


async def test_a_batch_answer_is_waited_for_only_once_its_last_member_is_released():
    # Aborting one member of a batch request cannot promise the batch's answer, which comes after
    # the other members: the abort does not wait for it.
    registry = InFlightRegistry()
    proceed = asyncio.Event()
    made: dict = {}

    async def app(scope, receive, send):
        made["first"] = registry.add("b-0")
        registry.add("b-1")
        registry.release("b-0")
        await proceed.wait()

    served = asyncio.ensure_future(DeliveryMiddleware(app)(http_scope(), receive, lambda m: None))
    await steps()
    waiter = asyncio.ensure_future(registry.wait_released([made["first"]], timeout_s=30))
    await steps()
    assert waiter.done() and waiter.result() is True
    proceed.set()
    await served


async def test_installed_on_an_app_the_wait_ends_at_the_outermost_send_whatever_is_added_after():
    # The engines add their middlewares after the plugin has loaded. A middleware that reads the
    # answer and passes it on later (vLLM's log_response) must not count as the answer written:
    # the wait ends only once the server's own send has the last chunk.
    registry = InFlightRegistry()
    let_out = asyncio.Event()
    order: list[str] = []
    app = FastAPI()

    @app.post("/gen")
    async def gen() -> PlainTextResponse:
        registry.add("r1")
        registry.release("r1")
        return PlainTextResponse("done")

    install_outermost(app)

    @app.middleware("http")
    async def slow_hand_over(request, call_next):
        # As vLLM's log_response: read the whole answer, then pass it on later.
        response = await call_next(request)
        body = b"".join([chunk async for chunk in response.body_iterator])
        await let_out.wait()
        return Response(body, status_code=response.status_code)

    async def send(message):
        if message["type"] == "http.response.body" and not message.get("more_body"):
            order.append("answer written")

    served = asyncio.ensure_future(app(http_scope("/gen"), receive, send))
    await steps(50)
    waiter = asyncio.ensure_future(registry.wait_released([], timeout_s=30, everything=True))
    await steps(50)
    assert not waiter.done() and order == []
    let_out.set()
    await waiter
    order.append("waited")
    await served
    assert order == ["answer written", "waited"]
