"""ContractActor and with_contract, without Ray: the actor's one method answers the contract on
the engine the actor holds (a stub engine here), wherever the engine is kept."""

import asyncio
import json

import pytest

from engine_plugins.engines.stub.engine import StubEngine
from engine_plugins.host.config import Settings
from engine_plugins.inprocess import ContractActor, attach, with_contract
from engine_plugins.engines.stub import inprocess as stub_inprocess

HEADERS = {"X-Engine-Plugins-Contract": "1"}


def run(coro):
    return asyncio.run(coro)


def test_the_mixin_answers_on_self_engine():
    class Actor(ContractActor):
        def __init__(self):
            self.engine = StubEngine()

    actor = Actor()
    status, reason, body = run(actor.engine_plugins_http("GET", "/v1/loads", None, None, HEADERS))
    assert (status, reason) == (200, "OK") and json.loads(body)["engine"] == "stub"
    status, _, body = run(actor.engine_plugins_http("POST", "/update_weight_version", b'{"new_version": "v9"}', None,
                                                    {**HEADERS, "Content-Type": "application/json"}))
    assert status == 200 and json.loads(body)["new_version"] == "v9" and actor.engine.weight_version() == "v9"


def test_an_actor_without_an_engine_says_what_to_do():
    class Actor(ContractActor):
        pass

    with pytest.raises(AttributeError, match="set self.engine"):
        run(Actor().engine_plugins_http("GET", "/v1/loads"))


def test_with_contract_adds_the_method_to_a_class_left_as_it_is():
    class Framework:
        """A framework's actor, its engine under another name."""

        def __init__(self):
            self.llm = StubEngine()

    wrapped = with_contract(Framework, engine="llm")
    assert wrapped.__name__ == "Framework" and issubclass(wrapped, Framework) and not hasattr(Framework, "engine_plugins_http")
    actor = wrapped()
    assert run(actor.engine_plugins_http("GET", "/is_paused"))[0] == 200
    by_function = with_contract(Framework, engine=lambda self: self.llm)()
    assert run(by_function.engine_plugins_http("GET", "/is_paused"))[0] == 200


def test_with_contract_refuses_a_ray_actor_class():
    class ActorClass:
        __ray_metadata__ = object()

    with pytest.raises(TypeError, match="before ray.remote"):
        with_contract(ActorClass)


def test_the_route_prefix_and_the_settings_key_are_the_actors_own(monkeypatch):
    engine = StubEngine()
    # The stack built with a prefix and a key, as ENGINE_PLUGINS_ROUTE_PREFIX and ..._API_KEY give it.
    settings = Settings(route_prefix="/rl", api_key="secret")
    original = stub_inprocess.attach
    monkeypatch.setattr(stub_inprocess, "attach", lambda e: original(e, settings))
    attach(engine)

    class Actor(ContractActor):
        def __init__(self):
            self.engine = engine

    # The caller sends the contract's path and no key: the handle is the credential.
    status, _, body = run(Actor().engine_plugins_http("GET", "/v1/loads"))
    assert status == 200, body
    assert run(attach(engine).http("GET", "/rl/v1/loads"))[0] == 401  # the key still guards the app itself


def test_the_stub_adapter_takes_only_a_stub_engine():
    with pytest.raises(TypeError, match="StubEngine"):
        stub_inprocess.attach(object())
