"""Shared fixtures: the contract targets (one server per target per session) and anyio."""

from __future__ import annotations

import pytest

from targets import TARGETS, Target


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--target",
        action="append",
        default=None,
        help=f"run the contract suite against these targets only (default: all of {', '.join(TARGETS)})",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("target") or list(TARGETS)
        unknown = [t for t in chosen if t not in TARGETS]
        if unknown:
            raise pytest.UsageError(f"unknown --target {unknown}: known are {list(TARGETS)}")
        # Engine-specific tests say which targets they run on: @pytest.mark.targets("sglang").
        marker = metafunc.definition.get_closest_marker("targets")
        if marker is not None:
            chosen = [t for t in chosen if t in marker.args]
        metafunc.parametrize("target", chosen, indirect=True, scope="session")


# A test against a real engine on a shared two-core machine sometimes cannot arrange its
# situation (the requests finish before all of them are seen in flight): it then fails its setup
# with "setup: ..." (contract/api.py), never its behaviour. Only such failures are run again, up to three times.
REAL_TARGETS = {"sglang", "vllm"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("target") in REAL_TARGETS:
            item.add_marker(pytest.mark.flaky(reruns=3, only_rerun=["setup: "]))


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
