"""The hookspecs: firstresult, given the control and the request, documented, each served by a route, each in the manual."""

import inspect

import pytest

from engine_plugins import hookimpl
from engine_plugins.contract import hookspecs
from engine_plugins.host.http_api import CONTRACT_ROUTES

SPECS = [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(fn, "engine_plugins_spec")]


def test_the_operations_are_specified():
    assert set(SPECS) == {"abort", "loads", "update_weight_version", "partial_generate", "pause", "resume", "is_paused",
                          "begin_weight_swap", "commit_weight_swap"}
    assert hookimpl is hookspecs.hookimpl


@pytest.mark.parametrize("name", SPECS)
def test_each_spec_is_firstresult_and_documented(name, readme):
    fn = getattr(hookspecs, name)
    assert fn.engine_plugins_spec["firstresult"] is True
    assert {"control", "http_request"} <= set(inspect.signature(fn).parameters)
    doc = inspect.getdoc(fn)
    assert "called by" in doc and "Returns" in doc
    assert f"`{name}`" in readme


def test_every_spec_is_served_by_a_route():
    handlers = {route.handler.__name__.lstrip("_") for route in CONTRACT_ROUTES}
    assert handlers == set(SPECS)


def test_the_module_says_how_hooks_are_called():
    doc = hookspecs.__doc__
    for what in ("awaitable", "answer", "defer", "decorate", "ContractError", "501", "trylast"):
        assert what in doc
