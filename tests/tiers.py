"""The test tiers by cost: which tests need a real engine (``real``), which run on an engine's
fake (``fake``) or on the stub (``stub``), and the quick loop's lower round counts.

The markers are derived, never written by hand on a target's test: conftest.py adds them at
collection from what each test uses, so that ``-m "not real"`` selects exactly the tests that
need no real engine, whatever targets the session has.
"""

from __future__ import annotations

import pytest

from engine_versions import VERSION_TARGETS
from targets import RELEASE_FAKES, REAL_TARGETS as REAL_ENGINE_TARGETS

# Every target that is a real engine server: the pinned engines' and every other release's.
REAL_TARGETS = frozenset({*REAL_ENGINE_TARGETS, *VERSION_TARGETS})
STUB = "stub"

# Marks that say a test drives a real engine it starts itself (no target): the patched engines
# (tests/patched/) and the real vLLM without the plugin (tests/client/test_real_native.py).
REAL_ENGINE_MARKS = ("patched_engine", "native_vllm")

# The quick loop (make test-quick, pytest --quick) runs this share of the fuzz examples and of the
# soaks' rounds (the race soak, the abort-then-pause race); make test runs them all.
QUICK_SHARE = 0.1


def target_tier(name: str) -> str:
    """The tier of contract target *name*: ``real``, ``stub``, or ``fake`` (an engine's fake with
    the real plugin: every other target)."""
    if name in REAL_TARGETS:
        return "real"
    return "stub" if name == STUB else "fake"


def targets_of(item: pytest.Item) -> set[str]:
    """The targets *item* uses: its ``target`` parameter and its ``uses_targets`` marks."""
    names: set[str] = set()
    callspec = getattr(item, "callspec", None)
    # An empty parameter set (no selected target is among the test's) leaves pytest's NOTSET there.
    if callspec is not None and isinstance(callspec.params.get("target"), str):
        names.add(callspec.params["target"])
    for mark in item.iter_markers("uses_targets"):
        names.update(mark.args)
    return names


def tiers_of(item: pytest.Item) -> set[str]:
    """The tier markers *item* gets: one per kind of target it uses, and ``real`` when it is marked
    as driving a real engine of its own. Empty for tests on no target (unit tests, clients
    against in-process servers or stubs they start themselves)."""
    tiers = {target_tier(name) for name in targets_of(item)}
    if any(item.get_closest_marker(mark) is not None for mark in (*REAL_ENGINE_MARKS, "real")):
        tiers.add("real")
    return tiers


def mark_tiers(items: list[pytest.Item]) -> None:
    """Add each item's tier markers (those it has not already)."""
    for item in items:
        for tier in sorted(tiers_of(item)):
            if item.get_closest_marker(tier) is None:
                item.add_marker(tier)


def add_quick_option(parser: pytest.Parser) -> None:
    """The ``--quick`` switch: fewer fuzz examples and soak rounds (make test-quick)."""
    parser.addoption("--quick", action="store_true", default=False,
                     help=f"the quick loop: {QUICK_SHARE:.0%} of the fuzz examples and soak rounds")


def rounds(config: pytest.Config, full: int, target: str = "") -> int:
    """How many of *full* rounds (or examples) to run on *target*: all of them, or a share (at
    least one) with ``--quick`` and on the fakes of releases other than the pinned ones, whose
    differences are few and whose races are the pinned fakes' (``make test`` stays in its time)."""
    if not config.getoption("quick") and target not in RELEASE_FAKES:
        return full
    return max(1, round(full * QUICK_SHARE))


def group_by_target(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n``), keep each target's tests on one worker (``--dist loadgroup``),
    so that each target's server starts once, not once per worker."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "target" in callspec.params:
            item.add_marker(pytest.mark.xdist_group(callspec.params["target"]))
