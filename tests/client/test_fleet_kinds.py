"""The two fleets (direct servers, an smg gateway's workers) offer the same operations, each makes
only the HTTP clients it uses, and the client package has no import cycle."""

import ast
import inspect
from pathlib import Path

import httpx
import pytest

import engine_plugins.client as client_package
from engine_plugins.client import Fleet, FleetLike, GatewayFleet, ServerFleet
from engine_plugins.client import transport

pytestmark = pytest.mark.anyio

CLIENT = Path(client_package.__file__).parent


def _protocol_operations() -> list[str]:
    """Every operation FleetLike declares (its async context manager's included)."""
    return [name for name, member in vars(FleetLike).items()
            if inspect.isfunction(member) and (not name.startswith("_") or name in ("__aenter__", "__aexit__"))]


def _parameters(function) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("fleet_class", [ServerFleet, GatewayFleet])
def test_each_fleet_has_every_operation_with_the_protocols_parameters(fleet_class):
    operations = _protocol_operations()
    assert {"abort", "abort_until_idle", "weight_swap", "commit_weight_swap", "aclose", "__aenter__"} <= set(operations)
    for name in operations:
        declared, offered = getattr(FleetLike, name), getattr(fleet_class, name)
        assert _parameters(offered) == _parameters(declared), f"{fleet_class.__name__}.{name}"
        assert inspect.iscoroutinefunction(offered) == inspect.iscoroutinefunction(declared), f"{fleet_class.__name__}.{name}"


@pytest.fixture
def made_clients(monkeypatch) -> list:
    """Every HTTP client the client package makes while the test runs (its own or httpx's)."""
    made: list = []

    def counting(real):
        def make(*args, **kwargs):
            made.append(real(*args, **kwargs))
            return made[-1]
        return make

    monkeypatch.setattr(transport, "make_http_client", counting(transport.make_http_client))
    # Both fleets make their client through HttpClientOwner, in transport.
    monkeypatch.setattr(transport, "make_control_client", counting(transport.make_control_client))
    return made


async def test_fleet_makes_the_fleet_its_arguments_name_and_only_the_clients_it_uses(made_clients):
    urls = ["http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:11"]
    async with Fleet(urls, api_key="k") as direct:
        assert isinstance(direct, ServerFleet) and isinstance(direct, FleetLike)
        assert [s.url for s in direct.servers] == urls
        assert len(made_clients) == 1 and all(s.http is direct.http for s in direct.servers), "one HTTP client, shared"
    async with Fleet(gateway="http://127.0.0.1:12", api_key="k", selector="engine=sglang") as gateway:
        assert isinstance(gateway, GatewayFleet) and isinstance(gateway, FleetLike)
        assert gateway.gateway.selector == "engine=sglang"
        assert len(made_clients) == 2, "the gateway's one HTTP client"
    assert all(c.is_closed for c in made_clients)


async def test_a_shared_http_client_is_used_by_either_fleet_and_left_open(made_clients):
    async with httpx.AsyncClient() as http:
        async with Fleet(["http://127.0.0.1:9", "http://127.0.0.1:10"], http=http) as direct:
            assert all(s.http is http for s in direct.servers)
        async with Fleet(gateway="http://127.0.0.1:12", http=http) as gateway:
            assert gateway.http is http
        assert not made_clients and not http.is_closed


def _client_imports(module: Path) -> set[str]:
    """The client modules *module* imports, wherever in it the import is (a late import inside a
    function hides a cycle at import time but is a cycle all the same)."""
    found = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [a.name for a in node.names]
            found |= {n.split(".")[0] for n in names if (CLIENT / f"{n.split('.')[0]}.py").exists()}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engine_plugins.client."):
            found.add(node.module.split(".")[2])
    return found - {"__init__"}


def test_the_client_modules_import_each_other_without_a_cycle():
    graph = {path.stem: _client_imports(path) for path in CLIENT.glob("*.py") if path.stem != "__init__"}
    assert {"fleet", "server_fleet", "gateway_fleet", "fleet_results"} <= set(graph)
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
