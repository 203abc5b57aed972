"""The plugin's hook on SGLang's data-parallel controller loop (``engine_plugins.engines.sglang.dp_controller``),
on stand-ins for its socket and for zmq's poller: every message is routed, in order, also one
that arrives after the loop waited; without ``--sleep-on-idle`` SGLang's own loop runs. The real
controller runs it in the ``sglang-dp2`` target (the contract suite and tests/sglang/test_sglang_dp.py)."""

import queue
import threading
import types

import pytest

from engine_plugins.engines.sglang.dp_controller import (
    DPControllerNames,
    recv_pyobj,
    register_idle_sleep,
    run_sleeping_loop,
)


class ZMQError(Exception):
    """zmq.ZMQError: what a receive without blocking raises on an empty socket."""


class Socket:
    """A ZMQ PULL socket's part the loop uses: messages in order."""

    def __init__(self) -> None:
        self.messages: "queue.Queue[object]" = queue.Queue()
        self.polls = 0


class Poller:
    """zmq.Poller: ``poll(ms)`` returns once a registered socket has a message, or after *ms*."""

    def __init__(self) -> None:
        self.sockets: list[Socket] = []

    def register(self, socket: Socket, flags: int) -> None:
        self.sockets.append(socket)

    def poll(self, timeout_ms: int) -> list:
        socket = self.sockets[0]
        socket.polls += 1
        try:
            message = socket.messages.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return []
        socket.messages.queue.appendleft(message)  # looked at, not taken
        return [(socket, 1)]


def sock_recv(socket: Socket, flags: int = 0) -> object:
    assert flags == FAKE_ZMQ.NOBLOCK, "the loop receives without blocking after its wait"
    try:
        return socket.messages.get_nowait()
    except queue.Empty:
        raise ZMQError("Resource temporarily unavailable") from None


FAKE_ZMQ = types.SimpleNamespace(Poller=Poller, POLLIN=1, NOBLOCK=2, ZMQError=ZMQError)


class Stop(Exception):
    """Raised by the dispatcher to end the loop (SGLang's never returns)."""


def controller_with(routed: list) -> types.SimpleNamespace:
    def dispatch(message: object) -> None:
        if message == "stop":
            raise Stop
        routed.append(message)

    return types.SimpleNamespace(
        recv_from_tokenizer=Socket(), soft_watchdog=types.SimpleNamespace(feed=lambda: None), _request_dispatcher=dispatch
    )


def names(sleep_on_idle: bool, registered: dict) -> DPControllerNames:
    registry = types.SimpleNamespace(register=lambda target, hook, kind: registered.update({target: hook}))
    return DPControllerNames(
        DataParallelController=type("DataParallelController", (), {}),
        HookRegistry=registry,
        HookType=types.SimpleNamespace(AROUND="around"),
        zmq=FAKE_ZMQ,
        sock_recv=sock_recv,
        sleep_on_idle=lambda controller: sleep_on_idle,
    )


def test_the_sleeping_loop_routes_every_message_in_order_also_after_waiting():
    routed: list = []
    controller = controller_with(routed)
    socket = controller.recv_from_tokenizer
    for message in ("req-1", "abort-1", "req-2"):
        socket.messages.put(message)
    loop = threading.Thread(target=lambda: pytest.raises(Stop, run_sleeping_loop, names(True, {}), controller), daemon=True)
    loop.start()
    # Wait (by condition) until the loop has routed the first burst and gone back to its wait.
    while not (routed == ["req-1", "abort-1", "req-2"] and socket.polls >= 2):
        loop.join(0.01)
    socket.messages.put("req-3")
    socket.messages.put("stop")
    loop.join(10)
    assert not loop.is_alive()
    assert routed == ["req-1", "abort-1", "req-2", "req-3"]


def test_the_hook_keeps_sglangs_loop_without_sleep_on_idle():
    for sleep_on_idle, expected in ((False, "sglang's loop"), (True, None)):
        registered: dict = {}
        register_idle_sleep(names(sleep_on_idle, registered))
        (target, hook), = registered.items()
        assert target.endswith("DataParallelController.event_loop")
        controller = controller_with([])
        controller.recv_from_tokenizer.messages.put("stop")
        if expected is None:
            with pytest.raises(Stop):
                hook(lambda c: "sglang's loop", controller)
        else:
            assert hook(lambda c: "sglang's loop", controller) == expected


class PyobjSocket(Socket):
    """The socket's own receive, which the controller's loop calls before 0.5.15 (no sock_recv)."""

    def recv_pyobj(self, flags: int = 0) -> object:
        return sock_recv(self, flags)


def test_before_0_5_15_the_sleeping_loop_receives_with_the_sockets_own_recv_pyobj():
    routed: list = []
    controller = controller_with(routed)
    controller.recv_from_tokenizer = socket = PyobjSocket()
    for message in ("req-1", "abort-1", "stop"):
        socket.messages.put(message)
    loop_names = names(True, {})
    loop_names.sock_recv = recv_pyobj
    with pytest.raises(Stop):
        run_sleeping_loop(loop_names, controller)
    assert routed == ["req-1", "abort-1"]
