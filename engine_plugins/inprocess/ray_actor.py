"""The contract on an engine held in a Ray actor, reached with the actor's handle.

Frameworks (verl, OpenRLHF, NeMo-RL, ROLL, SkyRL) hold each engine inside a Ray actor and call it
with ``actor.method.remote(...)``. Add :class:`ContractActor` to the actor's bases and the actor
answers the contract through one method, ``engine_plugins_http``: the client's Ray transport
(``engine_plugins.client.ray_transport``) sends each contract call through it, so a
:class:`~engine_plugins.client.Fleet` takes the actor's handle where it takes a URL::

    @ray.remote
    class Rollout(ContractActor):
        def __init__(self, ...):
            self.engine = AsyncLLM.from_engine_args(...)     # found as self.engine

    fleet = Fleet([Rollout.remote(...), "http://10.0.0.7:30000"])

Ray carries the call (no socket, no RPC of this package's own); the request is answered by the
contract's app in the actor's process (:meth:`~.control.EngineControl.http`). This module needs
no Ray: it is plain Python that Ray happens to call.

An ``async`` method makes Ray run the actor as an asyncio actor (all its methods on one event
loop), which is what an in-process AsyncLLM or TokenizerManager needs anyway.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Union

from engine_plugins.inprocess.attach import attach

METHOD = "engine_plugins_http"
"""The actor method the client's Ray transport calls."""

ENGINE_ATTRIBUTE = "engine"
"""Where :class:`ContractActor` finds the engine by default: ``self.engine``."""

EngineGetter = Union[str, Callable[[Any], Any]]
"""An attribute name of the actor, or a function of the actor returning its engine."""


async def contract_http(engine: Any, method: str, path: str, body: Optional[bytes] = None,
                        params: Optional[Mapping[str, Any]] = None,
                        headers: Optional[Mapping[str, str]] = None) -> tuple[int, str, bytes]:
    """Answer one contract request on *engine* (an engine held in this process) with the
    contract's app, no socket: ``(status, reason, body)``. What ``engine_plugins_http`` does, for
    an actor method written by hand.

    *path* is the contract's path (``/v1/loads``): the route prefix the engine's settings give
    (``ENGINE_PLUGINS_ROUTE_PREFIX``) is put before it here, since a caller holding the handle
    cannot know it. The API key the settings give is sent for the caller: holding the actor's
    handle is the credential (the key guards the routes served on a socket).
    """
    control = attach(engine)
    settings = control.stack.settings
    prefix = settings.route_prefix
    if prefix and not path.startswith(prefix + "/"):
        path = prefix + path
    sent = dict(headers or {})
    if settings.api_key and not any(k.lower() == "authorization" for k in sent):
        sent["Authorization"] = f"Bearer {settings.api_key}"
    return await control.http(method, path, body, params, sent)


class ContractActor:
    """A mixin for a Ray actor class holding an engine in-process: one base class more, and the
    actor answers the contract through ``engine_plugins_http``, so that its handle goes in a
    :class:`~engine_plugins.client.Fleet`.

    The engine is ``self.engine`` unless the class overrides :meth:`engine_plugins_engine`.
    """

    def engine_plugins_engine(self) -> Any:
        """The engine this actor holds (``self.engine``; override it where the engine is elsewhere)."""
        try:
            return getattr(self, ENGINE_ATTRIBUTE)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute {ENGINE_ATTRIBUTE!r}: set self.{ENGINE_ATTRIBUTE} to the engine "
                "(vLLM's AsyncLLM, SGLang's Engine) or override engine_plugins_engine()"
            ) from None

    async def engine_plugins_http(self, method: str, path: str, body: Optional[bytes] = None,
                                  params: Optional[Mapping[str, Any]] = None,
                                  headers: Optional[Mapping[str, str]] = None) -> tuple[int, str, bytes]:
        """One contract request answered in this actor: ``(status, reason, body)``
        (see :func:`contract_http`)."""
        return await contract_http(self.engine_plugins_engine(), method, path, body, params, headers)


def with_contract(cls: type, engine: EngineGetter = ENGINE_ATTRIBUTE) -> type:
    """*cls* with :class:`ContractActor` added, for an actor class that cannot be edited (a
    framework's): ``ray.remote(with_contract(LLMRayActor, engine="llm")).remote(...)``.

    *engine*: the attribute of the actor holding the engine, or a function of the actor returning
    it. Give the plain class, before ``ray.remote``.
    """
    if hasattr(cls, "__ray_metadata__"):  # Ray's ActorClass: its methods cannot be added to
        raise TypeError(f"with_contract takes the actor's class before ray.remote, not the Ray actor class {cls.__name__}")
    getter = (lambda actor: getattr(actor, engine)) if isinstance(engine, str) else engine

    def engine_plugins_engine(self: Any) -> Any:
        """The engine, as *engine* finds it."""
        return getter(self)

    # The same name (Ray shows it in its logs and state), a class of its own: pickled by value,
    # as every class Ray ships to its workers that is not importable by name.
    return type(cls.__name__, (cls, ContractActor), {
        "engine_plugins_engine": engine_plugins_engine, "__doc__": cls.__doc__, "__module__": cls.__module__,
    })


__all__ = ["ContractActor", "METHOD", "contract_http", "with_contract"]
