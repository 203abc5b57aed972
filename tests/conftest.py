"""Shared fixtures: the contract targets (one server per target per session) and anyio."""

from __future__ import annotations

import contextlib
from typing import ContextManager, Iterator, Optional, Union

import pytest

from engine_versions import PATCHED_TARGETS, runs_on
from recovery import make_usable
from target_times import TargetTimes, label_targets
from targets import DEDICATED_TARGETS, NO_ENGINE_ROUTES, OPT_IN_TARGETS, TARGETS, Target
from tiers import REAL_TARGETS, add_quick_option, group_by_target, mark_tiers, targets_of


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--target",
        action="append",
        default=None,
        help=f"run the contract suite against these targets only (default: all of {', '.join(TARGETS)}, "
        f"except {', '.join(sorted(OPT_IN_TARGETS))}, which run only when named); "
        f"{', '.join(sorted(PATCHED_TARGETS))}: a refused release's patched server, for tests/patched/ only",
    )
    add_quick_option(parser)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("target") or [t for t in TARGETS if t not in OPT_IN_TARGETS]
        unknown = [t for t in chosen if t not in TARGETS and t not in PATCHED_TARGETS]
        if unknown:
            raise pytest.UsageError(f"unknown --target {unknown}: known are {[*TARGETS, *PATCHED_TARGETS]}")
        # A refused release's patched server runs tests/patched/ only (its conftest), no contract test.
        chosen = [t for t in chosen if t in TARGETS]
        # Engine-specific tests say which targets they run on: @pytest.mark.targets("sglang").
        marker = metafunc.definition.get_closest_marker("targets")
        if marker is not None:
            chosen = [t for t in chosen if t in marker.args]
        else:
            chosen = [t for t in chosen if t not in DEDICATED_TARGETS]
        # Tests of the engine's own routes need a target that serves them.
        if metafunc.definition.get_closest_marker("engine_routes") is not None:
            chosen = [t for t in chosen if t not in NO_ENGINE_ROUTES]
        # The other engine releases (engine@version) run the smoke subset only (engine_versions.runs_on).
        chosen = [t for t in chosen if runs_on(t, metafunc.definition.nodeid)]
        metafunc.parametrize("target", chosen, indirect=True, scope="session")


# A test against a real engine fails its setup with "setup: ..." (contract/api.py), never its
# behaviour, when it cannot arrange its situation in time. The engines' CPU placement
# (tools/launcher/cpu.py) is what keeps that from happening; a rerun is only the last
# guard against a machine that stalls anyway, and the summary counts them ("rerun").
SETUP_RERUNS = 2


def pytest_configure(config: pytest.Config) -> None:
    # The test session is the engines' client: it runs where the CPU profile puts clients.
    from tools.launcher.cpu import selected_profile

    selected_profile()[1].place_client()
    config.pluginmanager.register(TargetTimes(), "engine-plugins-target-times")


# First, so that -m sees the tier markers (tiers.py: real, fake, stub).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tiers(items)
    group_by_target(config, items)
    label_targets(items)
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("target") in REAL_TARGETS:
            item.add_marker(pytest.mark.flaky(reruns=SETUP_RERUNS, only_rerun=["setup: "]))


class RunningTargets:
    """The targets' servers, each started at the first test that uses it and stopped right after
    the last one (a real engine takes a minute to start, and an idle one holds gigabytes).

    pytest runs the tests of one target together; a tier that needs several targets at once (the
    gateway's, in front of SGLang and vLLM) says so with ``@pytest.mark.uses_targets(...)`` and
    shares their servers instead of starting its own.
    """

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.running: dict[str, tuple[ContextManager[Target], Target]] = {}
        self.failed: dict[str, BaseException] = {}
        self.last_user: Optional[dict[str, pytest.Item]] = None

    def get(self, name: str) -> Target:
        """The running server of target *name*, started now if it is not running."""
        if name in self.failed:
            raise self.failed[name]
        if name not in self.running:
            manager = TARGETS[name](self.tmp_path_factory.mktemp(name))
            try:
                self.running[name] = (manager, manager.__enter__())
            except BaseException as exc:
                self.failed[name] = exc  # a server that cannot start fails each test once, fast
                raise
        return self.running[name][1]

    def done_with(self, item: pytest.Item) -> None:
        """Stop the servers whose last test was *item*."""
        if self.last_user is None:
            self.last_user = {}
            for each in item.session.items:
                for name in targets_of(each):
                    self.last_user[name] = each
        for name, last in self.last_user.items():
            if last is item:
                self.stop(name)

    def recover(self, item: pytest.Item) -> None:
        """After *item* failed: make its target's server usable again, or stop it, so that the
        next test starts a new one rather than fail behind it (tests/recovery.py)."""
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("target") if callspec is not None else None
        if name not in self.running:
            return
        why = make_usable(self.running[name][1])
        if why is not None:
            reporter = item.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"\n[{name}] after {item.name} failed, the server is restarted: {why}", yellow=True)
            self.stop(name)

    def stop(self, name: str) -> None:
        """Stop target *name*'s server if it runs."""
        manager, _ = self.running.pop(name, (None, None))
        if manager is not None:
            manager.__exit__(None, None, None)


_running: Optional[RunningTargets] = None


@pytest.fixture(scope="session")
def running_targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningTargets]:
    """The session's target servers; every one still running is stopped at the end."""
    global _running
    _running = RunningTargets(tmp_path_factory)
    try:
        yield _running
    finally:
        for name in list(_running.running):
            with contextlib.suppress(Exception):
                _running.stop(name)
        _running = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Union[pytest.Item, None]):
    # After the whole protocol, reruns included: a rerun of the last test still has its server.
    yield
    if _running is not None:
        if any(report.failed for report in getattr(item, "engine_plugins_reports", ())):
            _running.recover(item)
        _running.done_with(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    item.engine_plugins_reports = (*getattr(item, "engine_plugins_reports", ()), outcome.get_result())


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest, running_targets: RunningTargets) -> Target:
    """A running server for the named target, started once per session and always stopped."""
    return running_targets.get(request.param)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
