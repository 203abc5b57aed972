"""The link between the API server processes of one server (vLLM's ``--api-server-count N``).

Each API process has its own front end and so its own registry, while clients reach any process
through the one port. Every process listens on a Unix socket of its own, in a directory named by
the server's *link*; a control call that must cover the whole server is passed to every other
process over these sockets and the answers are merged (:mod:`engine_plugins.fanout.spread`).

The link is made once per server by the process that starts the API processes (vLLM runs the
general plugin there before it starts them, whether ``vllm serve`` or a framework's launcher calls
vLLM's ``run_multi_api_server``: :func:`hand_out`), and reaches them
in the environment they inherit (:func:`handed`): a random name, so that no two servers share a
socket (also across containers that share ``/tmp``), and a random key that every call carries and
every process checks before it runs anything, so that no other server, and no other process of
the user that lacks the key, can pause or bump through the sockets.

One call is one connection: a JSON line out (``{"op", "args", "key", "start_by"}``), a JSON line
back (``{"ok"}`` or ``{"error"}``). A process whose socket does not answer a connect (none there,
or refused) is not serving: it binds its socket before its HTTP server starts, so it has accepted
no request, and a process that died took its requests with it. Every call is bounded in time, and
a call that reaches a process after the caller gave up on it (the process was stopped or stalled)
is not run there: a process that did not answer has not changed, unless it stalled mid-call.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Optional, Sequence

from engine_plugins.contract.errors import StartupError

# Under "vllm." so that vLLM's own log handler prints it in the API processes (only vLLM servers
# have several of them).
logger = logging.getLogger("vllm." + __name__)

Op = Callable[..., Awaitable[Any]]
"""A peer operation: called with the call's ``args`` as keywords, returns JSON-able data."""

# Time to connect to a peer and to hear back from it beyond the operation's own time limit.
CONNECT_S = 2.0
ANSWER_MARGIN_S = 5.0
# A process starts a call only this long after it was sent, so that whatever it starts ends
# (within the operation's own limit) before its caller stops waiting.
START_WITHIN_S = ANSWER_MARGIN_S / 2
_LINE_LIMIT = 64 * 1024 * 1024

LINK_ENV = "_ENGINE_PLUGINS_PEER_LINK_{pid}"
"""The environment variable a server's link is handed to its API processes in; keyed by the pid
of the process that made it, so that a link inherited from further up is never taken for this
server's. Not an ``ENGINE_PLUGINS_*`` setting (those are checked against the known ones)."""


class PeerError(RuntimeError):
    """A peer process that is serving did not answer a call, or answered with an error."""

    answered = True
    """False when the process gave no answer (stopped, stalled, dropped the call): its state is unknown."""


class PeerSilent(PeerError):
    """A peer process that is serving gave no answer in time."""

    answered = False


@dataclass(frozen=True)
class Link:
    """What the API processes of one server share: the name of their socket directory and the
    key every call between them carries."""

    name: str
    key: str

    @classmethod
    def new(cls) -> "Link":
        """A link no other server has."""
        return cls(secrets.token_hex(16), secrets.token_hex(32))

    def encode(self) -> str:
        """As kept in the environment."""
        return f"{self.name}:{self.key}"

    @classmethod
    def decode(cls, value: str) -> "Link":
        """From :meth:`encode`'s text."""
        name, _, key = value.partition(":")
        if not name.isalnum() or not key:
            raise StartupError(f"engine_plugins: the API processes' link in the environment is malformed ({name!r}...)")
        return cls(name, key)


_handed_out: Optional[Link] = None


def hand_out(pid: Optional[int] = None) -> Link:
    """In the process that starts the API processes: make this server's link and put it in the
    environment they inherit. Once per process (vLLM may load its plugins more than once);
    *pid* stands for this process's (a fake server that plays vLLM's parent in-process)."""
    global _handed_out
    var = LINK_ENV.format(pid=pid or os.getpid())
    if _handed_out is None or var not in os.environ:
        _handed_out = Link.new()
        os.environ[var] = _handed_out.encode()
    return _handed_out


def handed(parent: int) -> Optional[Link]:
    """In an API process: the link its parent (pid *parent*) handed out, or None."""
    value = os.environ.get(LINK_ENV.format(pid=parent))
    return None if value is None else Link.decode(value)


def socket_dir() -> Path:
    """Where this user's servers keep their peer sockets: a directory only this user can enter."""
    path = Path(tempfile.gettempdir()) / f"engine-plugins-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    _check_private(path)
    return path


def _check_private(path: Path) -> None:
    """*path* is a directory of this user that no one else may enter (closed again if it was open)."""
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise StartupError(f"engine_plugins: {path} is not a directory of this user; remove it (the API processes' sockets go there)")
    if info.st_mode & 0o077:
        path.chmod(0o700)


class Peers:
    """This process (*index*) among the *count* API processes of the server with *link*."""

    def __init__(self, link: Link, index: int, count: int, directory: Optional[Path] = None) -> None:
        if not 0 <= index < count:
            raise ValueError(f"API server index {index} is not in 0..{count - 1}")
        self.link = link
        self.index = index
        self.count = count
        self._dir = (directory or socket_dir()) / link.name
        self._server: Optional[asyncio.AbstractServer] = None
        self._ops: dict[str, Op] = {}

    def path(self, index: int) -> Path:
        """The socket of process *index*."""
        return self._dir / f"{index}.sock"

    def others(self) -> list[int]:
        """The indexes of the other processes."""
        return [i for i in range(self.count) if i != self.index]

    async def listen(self, ops: Mapping[str, Op]) -> None:
        """Answer the other processes' calls to *ops* on this process's socket.

        A socket already at the path that answers a connect belongs to a live process and is
        left alone (a StartupError); one that does not was left by a process that died.
        """
        self._ops = dict(ops)
        self._dir.mkdir(mode=0o700, exist_ok=True)
        _check_private(self._dir)
        path = self.path(self.index)
        if path.exists() or path.is_symlink():
            if _answers(path):
                raise StartupError(f"engine_plugins: {path} is the socket of a live process; not taking it over")
            path.unlink()
        self._server = await asyncio.start_unix_server(self._answer, path=str(path), limit=_LINE_LIMIT)
        os.chmod(path, 0o600)
        # The engine may exit without closing this; the socket file must not outlive it.
        atexit.register(self._remove)

    async def close(self) -> None:
        """Stop answering and remove the socket."""
        if self._server is not None:
            self._server.close()
            self._server = None
            self._remove()

    def _remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(self.index).unlink()
        with contextlib.suppress(OSError):
            self._dir.rmdir()  # the last process of the server to go removes the directory

    async def call_each(self, op: str, limit_s: float, /, **args: Any) -> dict[int, Any]:
        """Call *op* with *args* on every other process at once; each serving process's answer
        by its index, or the :class:`PeerError` it failed with in its place.

        *limit_s* is the operation's own time limit; a serving process that does not answer
        within it (plus a margin) is a :class:`PeerSilent`.
        """
        return await self.call_some(self.others(), op, limit_s, **args)

    async def call_some(self, indexes: Sequence[int], op: str, limit_s: float, /, **args: Any) -> dict[int, Any]:
        """:meth:`call_each` on the processes *indexes* only."""
        answers = await asyncio.gather(*(self._call(i, op, limit_s, args) for i in indexes), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(answer, PeerError):
                raise answer
        return {i: a for i, a in zip(indexes, answers) if a is not _NOT_SERVING}

    async def call_all(self, op: str, limit_s: float, /, **args: Any) -> list[Any]:
        """:meth:`call_each`'s answers, in index order; a failure of any process raises a
        :class:`PeerError` naming every process that failed."""
        answers = await self.call_each(op, limit_s, **args)
        failed = [a for a in answers.values() if isinstance(a, PeerError)]
        if failed:
            raise (PeerSilent if any(not f.answered for f in failed) else PeerError)("; ".join(map(str, failed)))
        return [answers[i] for i in sorted(answers)]

    def _name(self, index: int) -> str:
        return f"API process {index} of {self.count}"

    async def _call(self, index: int, op: str, limit_s: float, args: Mapping[str, Any]) -> Any:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(self.path(index)), limit=_LINE_LIMIT), CONNECT_S
            )
        except (FileNotFoundError, ConnectionRefusedError):
            return _NOT_SERVING
        except (OSError, asyncio.TimeoutError) as exc:
            return PeerSilent(f"{self._name(index)} did not take the call {op!r}: {exc!r}")
        call = {"op": op, "args": dict(args), "key": self.link.key, "start_by": time.time() + START_WITHIN_S}
        try:
            writer.write(json.dumps(call).encode() + b"\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), limit_s + ANSWER_MARGIN_S)
        except asyncio.TimeoutError:
            return PeerSilent(f"{self._name(index)} did not answer {op!r} within {limit_s + ANSWER_MARGIN_S:.1f} s")
        except OSError as exc:
            return PeerSilent(f"{self._name(index)} dropped the call {op!r}: {exc!r}")
        finally:
            writer.close()
        if not line:
            return PeerSilent(f"{self._name(index)} closed the call {op!r} without an answer")
        answer = json.loads(line)
        if "error" in answer:
            return PeerError(f"{self._name(index)} failed {op!r}: {answer['error']}")
        return answer["ok"]

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            if not line:
                return
            answer = await self._run(line)
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the caller gave up (its own timeout); nothing to answer
        except (ValueError, asyncio.LimitOverrunError):
            logger.warning("engine_plugins: dropped a peer call on %s that is not one line of JSON", self.path(self.index))
        finally:
            writer.close()

    async def _run(self, line: bytes) -> dict:
        """The answer to one call: its op's result, or why it was not run or failed."""
        call = json.loads(line)
        key = call.get("key") if isinstance(call, dict) else None
        if not isinstance(key, str) or not hmac.compare_digest(key.encode(), self.link.key.encode()):
            logger.warning("engine_plugins: refused a call on %s without this server's key", self.path(self.index))
            return {"error": "refused: the call does not carry this server's key"}
        late = time.time() - float(call.get("start_by", 0))
        if late > 0:
            # The caller has stopped waiting (this process was stopped or stalled): running it
            # now would change this process behind the caller's back.
            logger.warning("engine_plugins: did not run the peer call %r, which reached this process %.1f s too late to start", call.get("op"), late)
            return {"error": f"the call reached it {late:.1f} s too late to start, and was not run"}
        try:
            return {"ok": await self._ops[call["op"]](**call.get("args", {}))}
        except Exception as exc:  # the caller reports it, naming this process
            logger.exception("engine_plugins: the peer call %r failed", call.get("op"))
            return {"error": f"{type(exc).__name__}: {exc}"}


_NOT_SERVING = object()


def _answers(path: Path) -> bool:
    """Whether a process listens on the Unix socket at *path*."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(CONNECT_S)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
