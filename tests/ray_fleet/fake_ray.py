"""A stand-in for a Ray actor handle, for the fast tests (the dev venv has no Ray): an actor
object held in this process, whose methods ``handle.method.remote(*args)`` start at once and
hand back an awaitable, as an ObjectRef is, with the arguments and the answer pickled on the way
(what Ray does to them), so that only what Ray could carry gets through.

:func:`fake_ray_module` is a ``ray`` module with the exceptions the client's Ray transport reads,
for the tests of its failures (a dead actor, one restarting, one raising).
"""

from __future__ import annotations

import asyncio
import pickle
import types
import uuid
from typing import Any, Optional


class FakeActorId:
    """Ray's ``ActorID``: what the transport reads of it (its hex)."""

    def __init__(self) -> None:
        self._hex = uuid.uuid4().hex[:32]

    def hex(self) -> str:
        """The id in hex, as Ray's."""
        return self._hex


class FakeActorHandle:
    """A handle to *actor* (an object in this process): ``handle.m.remote(...)`` runs ``actor.m``.

    ``fail_with``: an exception every call raises from then on (a dead actor: the fake
    ``RayActorError``). ``hang``: calls never answer (a hung actor).
    """

    def __init__(self, actor: Any) -> None:
        self._actor = actor
        self._actor_id = FakeActorId()
        self.fail_with: Optional[BaseException] = None
        self.hang = False
        self.calls: list[tuple[str, tuple]] = []
        self.cancelled: list[asyncio.Task] = []

    def __getattr__(self, name: str) -> "_FakeMethod":
        if name.startswith("_") or not callable(getattr(self._actor, name, None)):
            raise AttributeError(f"'FakeActorHandle' object has no attribute '{name}'")
        return _FakeMethod(self, name)


class _FakeMethod:
    def __init__(self, handle: FakeActorHandle, name: str) -> None:
        self.handle, self.name = handle, name

    def remote(self, *args: Any) -> "asyncio.Task":
        """Start the call now (as Ray submits it) and return its awaitable."""
        args = pickle.loads(pickle.dumps(args))
        self.handle.calls.append((self.name, args))
        task = asyncio.ensure_future(self._run(args))
        task.add_done_callback(lambda t: self.handle.cancelled.append(t) if t.cancelled() else None)
        return task

    async def _run(self, args: tuple) -> Any:
        if self.handle.fail_with is not None:
            raise self.handle.fail_with
        if self.handle.hang:
            await asyncio.Event().wait()
        answer = await getattr(self.handle._actor, self.name)(*args)
        return pickle.loads(pickle.dumps(answer))


def fake_ray_module() -> dict[str, types.ModuleType]:
    """``ray`` and ``ray.exceptions`` with Ray's exception classes the transport reads (the same
    hierarchy: ``ActorUnavailableError`` is a ``RayActorError``), for ``sys.modules``."""
    ray = types.ModuleType("ray")
    exceptions = types.ModuleType("ray.exceptions")

    class RayError(Exception):
        pass

    class RayActorError(RayError):
        pass

    class ActorUnavailableError(RayActorError):
        pass

    class TaskCancelledError(RayError):
        pass

    class RayTaskError(RayError):
        pass

    for cls in (RayError, RayActorError, ActorUnavailableError, TaskCancelledError, RayTaskError):
        setattr(exceptions, cls.__name__, cls)
    ray.exceptions = exceptions

    class ObjectRef:  # never one of the fake handle's answers: the transport cancels those as tasks
        pass

    ray.ObjectRef = ObjectRef
    ray.cancel = lambda ref: None
    return {"ray": ray, "ray.exceptions": exceptions}

