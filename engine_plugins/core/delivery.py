"""When a request's HTTP answer has been written: so that an abort with wait answers after its clients.

An engine releases a request (the registry's ``release``) when its generation ends, which is
before the route that served it has built and written its answer; on SGLang it is not even the
request's own task that releases it (``docs/engine-notes.md``, "Answer delivery"). An abort with
wait that answered at the release could so answer before the clients it covered had theirs, and
a framework that reads its rollouts as soon as the abort returns would miss some.

:class:`DeliveryMiddleware`, the outermost layer of the server's ASGI app, gives every HTTP
request a :class:`Delivery` in a context variable; the registry records it on each entry the
request creates (:func:`current`); the abort waits, after the releases, for the deliveries of the
requests it covered (:func:`wait_delivered`). A delivery is done once the answer's last body
chunk has been handed to the server (uvicorn writes it to the socket there and then), or the
client has left, or the app has returned; the wait is bounded (:data:`DELIVERY_BOUND_S`), so that
a client that stopped reading cannot hold an abort.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any, Iterable, Optional

DELIVERY_BOUND_S = 5.0
"""The longest an abort waits for the answers of requests the engine has released."""

# Message types that end an HTTP answer (``http.response.pathsend``: the ASGI path-send extension).
_LAST_BODY = "http.response.body"
_PATHSEND = "http.response.pathsend"


class Delivery:
    """One HTTP request's answer. ``open``: the registry entries of this request not yet released
    (a batch request has several, and its answer comes after the last)."""

    __slots__ = ("delivered", "open", "_listed_in")

    def __init__(self) -> None:
        self.delivered = asyncio.Event()
        self.open = 0
        self._listed_in: Optional[set] = None

    def finish(self) -> None:
        """The answer has been written (or never will be): wake the aborts waiting for it."""
        self.delivered.set()
        if self._listed_in is not None:
            self._listed_in.discard(self)
            self._listed_in = None

    def list_in(self, answering: set) -> None:
        """Stay in the set *answering* until the answer is written (the registry's list of
        released requests whose answers are on their way)."""
        if not self.delivered.is_set():
            answering.add(self)
            self._listed_in = answering


_current: ContextVar[Optional[Delivery]] = ContextVar("engine_plugins_delivery", default=None)


def current() -> Optional[Delivery]:
    """The delivery of the HTTP request being served in this context (None outside one)."""
    return _current.get()


class DeliveryMiddleware:
    """Pure ASGI middleware: a :class:`Delivery` per HTTP request, finished when its answer is out.

    It must be the outermost layer (:func:`install_outermost`): a layer outside it that passes
    the answer on later (Starlette's ``BaseHTTPMiddleware`` hands it to another task) would make
    "handed on" mean less than "written".
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        delivery = Delivery()
        token = _current.set(delivery)

        async def sending(message: dict) -> None:
            last = (message["type"] == _LAST_BODY and not message.get("more_body", False)) or message["type"] == _PATHSEND
            try:
                await send(message)
            finally:
                if last:
                    delivery.finish()

        async def receiving() -> dict:
            message = await receive()
            if message["type"] == "http.disconnect":
                delivery.finish()  # nobody left to answer
            return message

        try:
            await self.app(scope, receiving, sending)
        finally:
            _current.reset(token)
            delivery.finish()


def install_outermost(app: Any) -> None:
    """Make :class:`DeliveryMiddleware` the outermost layer of the Starlette/FastAPI *app*,
    outside every middleware added before or after (Starlette builds its stack at the first
    request, through ``build_middleware_stack``). Installing twice is harmless."""
    build = app.build_middleware_stack
    if getattr(build, "_engine_plugins_delivery", False):
        return

    def build_with_delivery() -> Any:
        return DeliveryMiddleware(build())

    build_with_delivery._engine_plugins_delivery = True  # type: ignore[attr-defined]
    app.build_middleware_stack = build_with_delivery


async def wait_delivered(deliveries: Iterable[Optional[Delivery]], timeout_s: float) -> bool:
    """Wait until every complete answer among *deliveries* has been written; False after *timeout_s*.

    Skipped: None (a request made outside HTTP), a request whose other entries are still open
    (its answer is not complete yet, so no abort of a part of it can promise it), and the request
    being served here (an abort made from inside a request must not wait for its own answer).
    """
    own = current()
    pending = {d for d in deliveries if d is not None and d is not own and d.open == 0 and not d.delivered.is_set()}
    if not pending:
        return True
    waiters = [asyncio.ensure_future(d.delivered.wait()) for d in pending]
    _, not_done = await asyncio.wait(waiters, timeout=max(0.0, timeout_s))
    for waiter in not_done:
        waiter.cancel()
    return not not_done
