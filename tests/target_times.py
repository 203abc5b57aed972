"""Time per target: what each target's tests cost the session, printed at its end.

A release's smoke run or a fake's full suite is a line of ``make test``'s 45 minutes; this sums
each test's setup, call and teardown by the targets it uses (a server's start is in its first
test's setup; its stop, a few seconds after the last test, is not counted). Under pytest-xdist the
sums are over the workers, not wall time.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tiers import targets_of

# The report property that names an item's targets (user properties travel with xdist's reports).
TARGETS_PROPERTY = "engine_plugins_targets"
NO_TARGET = "(no target)"


def label_targets(items: list[pytest.Item]) -> None:
    """Record on each item the targets it uses, as one label (``sglang+vllm`` for a test on two)."""
    for item in items:
        item.user_properties.append((TARGETS_PROPERTY, "+".join(sorted(targets_of(item))) or NO_TARGET))


class TargetTimes:
    """Sums the reports' durations by target label and prints them, longest first."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.tests: defaultdict[str, set[str]] = defaultdict(set)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Count *report*'s phase under its item's targets."""
        label = dict(report.user_properties).get(TARGETS_PROPERTY, NO_TARGET)
        self.seconds[label] += report.duration
        self.tests[label].add(report.nodeid)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The table: seconds and tests per target label."""
        if not self.seconds:
            return
        terminalreporter.write_sep("-", "time per target (setup, call and teardown summed)")
        for label, seconds in sorted(self.seconds.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{seconds:9.1f} s {len(self.tests[label]):6d} tests  {label}")
