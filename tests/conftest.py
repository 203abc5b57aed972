"""Shared fixtures: the contract targets (one server per target per session) and anyio."""

from __future__ import annotations

import pytest

from engine_versions import SMOKE_ONLY, VERSION_TARGETS, in_smoke
from targets import OPT_IN_TARGETS, TARGETS, Target
from targets import REAL_TARGETS as REAL_ENGINE_TARGETS


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--target",
        action="append",
        default=None,
        help=f"run the contract suite against these targets only (default: all of {', '.join(TARGETS)}, "
        f"except {', '.join(sorted(OPT_IN_TARGETS))}, which run only when named)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("target") or [t for t in TARGETS if t not in OPT_IN_TARGETS]
        unknown = [t for t in chosen if t not in TARGETS]
        if unknown:
            raise pytest.UsageError(f"unknown --target {unknown}: known are {list(TARGETS)}")
        # Engine-specific tests say which targets they run on: @pytest.mark.targets("sglang").
        marker = metafunc.definition.get_closest_marker("targets")
        if marker is not None:
            chosen = [t for t in chosen if t in marker.args]
        # The other engine releases (engine@version) run the smoke subset only.
        if not in_smoke(metafunc.definition.nodeid):
            chosen = [t for t in chosen if t not in SMOKE_ONLY]
        metafunc.parametrize("target", chosen, indirect=True, scope="session")


# A test against a real engine fails its setup with "setup: ..." (contract/api.py), never its
# behaviour, when it cannot arrange its situation in time. The engines' CPU placement
# (engine_plugins/launcher/cpu.py) is what keeps that from happening; a rerun is only the last
# guard against a machine that stalls anyway, and the summary counts them ("rerun").
REAL_TARGETS = {*REAL_ENGINE_TARGETS, *VERSION_TARGETS}
SETUP_RERUNS = 2


def pytest_configure(config: pytest.Config) -> None:
    # The test session is the engines' client: it runs where the CPU profile puts clients.
    from engine_plugins.launcher.cpu import selected_profile

    selected_profile()[1].place_client()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("target") in REAL_TARGETS:
            item.add_marker(pytest.mark.flaky(reruns=SETUP_RERUNS, only_rerun=["setup: "]))


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Target:
    """A running server for the named target, started once per session and always stopped."""
    manager = TARGETS[request.param](tmp_path_factory.mktemp(request.param))
    running = manager.__enter__()
    request.addfinalizer(lambda: manager.__exit__(None, None, None))
    return running


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
