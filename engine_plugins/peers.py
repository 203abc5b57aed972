"""The link between the API server processes of one server (vLLM's ``--api-server-count N``).

Each API process has its own front end and so its own registry, while clients reach any process
through the one port. Every process listens on a Unix socket of its own, named by the server and
its index; a control call that must cover the whole server is passed to every other process over
these sockets and the answers are merged (:mod:`engine_plugins.spread`).

One call is one connection: a JSON line out (``{"op", "args"}``), a JSON line back (``{"ok"}``
or ``{"error"}``). A process whose socket does not answer a connect (none there, or refused) is
not serving: it binds its socket before its HTTP server starts, so it has accepted no request,
and a process that died took its requests with it. Every call is bounded in time.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Optional

from .errors import StartupError

logger = logging.getLogger(__name__)

Op = Callable[..., Awaitable[Any]]
"""A peer operation: called with the call's ``args`` as keywords, returns JSON-able data."""

# Time to connect to a peer and to hear back from it beyond the operation's own time limit.
CONNECT_S = 2.0
ANSWER_MARGIN_S = 5.0
_LINE_LIMIT = 64 * 1024 * 1024


class PeerError(RuntimeError):
    """A peer process that is serving did not answer a call, or answered with an error."""


def socket_dir() -> Path:
    """Where this user's servers keep their peer sockets: a directory only this user can enter
    (the sockets take control calls without a key)."""
    path = Path(tempfile.gettempdir()) / f"engine-plugins-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise StartupError(f"engine_plugins: {path} is not a directory of this user; remove it (the API processes' sockets go there)")
    if info.st_mode & 0o077:
        path.chmod(0o700)
    return path


class Peers:
    """This process (*index*) among the *count* API processes of server *server_id*."""

    def __init__(self, server_id: str, index: int, count: int, directory: Optional[Path] = None) -> None:
        if not 0 <= index < count:
            raise ValueError(f"API server index {index} is not in 0..{count - 1}")
        self.server_id = server_id
        self.index = index
        self.count = count
        self._dir = directory or socket_dir()
        self._server: Optional[asyncio.AbstractServer] = None
        self._ops: dict[str, Op] = {}

    def path(self, index: int) -> Path:
        """The socket of process *index*."""
        return self._dir / f"{self.server_id}.{index}.sock"

    def others(self) -> list[int]:
        """The indexes of the other processes."""
        return [i for i in range(self.count) if i != self.index]

    async def listen(self, ops: Mapping[str, Op]) -> None:
        """Answer the other processes' calls to *ops* on this process's socket."""
        self._ops = dict(ops)
        path = self.path(self.index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by a server that had this id before and did not stop cleanly
        self._server = await asyncio.start_unix_server(self._answer, path=str(path), limit=_LINE_LIMIT)
        os.chmod(path, 0o600)
        # The engine may exit without closing this; the socket file must not outlive it.
        atexit.register(_remove, path)

    async def close(self) -> None:
        """Stop answering and remove the socket."""
        if self._server is not None:
            self._server.close()
            self._server = None
            _remove(self.path(self.index))

    async def call_all(self, op: str, limit_s: float, /, **args: Any) -> list[Any]:
        """Call *op* with *args* on every other process at once; the answers of those that serve.

        *limit_s* is the operation's own time limit; a serving process that does not answer
        within it (plus a margin) raises :class:`PeerError` naming it.
        """
        answers = await asyncio.gather(*(self._call(i, op, limit_s, args) for i in self.others()))
        return [a for a in answers if a is not _NOT_SERVING]

    async def _call(self, index: int, op: str, limit_s: float, args: Mapping[str, Any]) -> Any:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(self.path(index)), limit=_LINE_LIMIT), CONNECT_S
            )
        except (FileNotFoundError, ConnectionRefusedError):
            return _NOT_SERVING
        except (OSError, asyncio.TimeoutError) as exc:
            raise PeerError(f"API server process {index} of {self.count} did not take the call {op!r}: {exc!r}") from None
        try:
            writer.write(json.dumps({"op": op, "args": dict(args)}).encode() + b"\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), limit_s + ANSWER_MARGIN_S)
        except asyncio.TimeoutError:
            raise PeerError(f"API server process {index} of {self.count} did not answer {op!r} within {limit_s + ANSWER_MARGIN_S:.1f} s") from None
        except OSError as exc:
            raise PeerError(f"API server process {index} of {self.count} dropped the call {op!r}: {exc!r}") from None
        finally:
            writer.close()
        if not line:
            raise PeerError(f"API server process {index} of {self.count} closed the call {op!r} without an answer")
        answer = json.loads(line)
        if "error" in answer:
            raise PeerError(f"API server process {index} of {self.count} failed {op!r}: {answer['error']}")
        return answer["ok"]

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            if not line:
                return
            call = json.loads(line)
            try:
                result = await self._ops[call["op"]](**call.get("args", {}))
                answer = {"ok": result}
            except Exception as exc:  # the caller reports it, naming this process
                logger.exception("engine_plugins: the peer call %r failed", call.get("op"))
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the caller gave up (its own timeout); nothing to answer
        finally:
            writer.close()


_NOT_SERVING = object()


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
