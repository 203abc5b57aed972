"""The tier markers (tests/tiers.py) on the suite as collected: ``real`` on every test that needs a
real engine and on no other, ``fake`` and ``stub`` by target, none on the tests without one; and
``-m "not real"`` selecting exactly the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from targets import REAL_TARGETS, TARGETS
from tiers import rounds

REPO = Path(__file__).resolve().parents[2]
TIERS = ("real", "fake", "stub")

# A plugin for the collecting pytest: what each collected item uses, its tier markers, and the
# marks written by hand (on the function or its module), read without tiers.py.
DUMP_PLUGIN = f'''
import json

def written(obj):
    marks = getattr(obj, "pytestmark", [])
    return [m.name for m in (marks if isinstance(marks, list) else [marks])]

def pytest_collection_finish(session):
    rows = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        rows.append({{
            "id": item.nodeid,
            "target": callspec.params.get("target") if callspec else None,
            "uses": sorted(a for m in item.iter_markers("uses_targets") for a in m.args),
            "fixtures": sorted(item.fixturenames),
            "tiers": sorted(m.name for m in item.iter_markers() if m.name in {TIERS!r}),
            "by_hand": sorted(set(written(getattr(item, "function", None)) + written(getattr(item, "module", None)))),
        }})
    print("COLLECTED " + json.dumps(rows))
'''
# Fixtures that start a real engine of their own, without a target, and the marks of the tests
# that drive one (the patched engines' tier, the real vLLM without the plugin).
REAL_ENGINE_FIXTURES = {"patched_sglang", "patched_vllm", "native_vllm", "real_pair", "real_gateway"}
REAL_ENGINE_MARKS = {"patched_engine", "native_vllm"}


def collect(tmp_path: Path, *args: str) -> dict[str, dict]:
    """The suite's items collected by a separate pytest with *args*, by node id."""
    (tmp_path / "tier_dump.py").write_text(DUMP_PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tier_dump", *args],
                         cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("COLLECTED ")]
    assert len(lines) == 1, out.stdout[-3000:] + out.stderr[-3000:]
    return {row["id"]: row for row in json.loads(lines[0].removeprefix("COLLECTED "))}


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> dict[str, dict]:
    """The whole suite as ``make test`` collects it."""
    return collect(tmp_path_factory.mktemp("tiers"))


def uses_a_real_engine(row: dict) -> bool:
    """Whether a collected item starts or uses a real engine server, judged from what it uses."""
    named = {row["target"], *row["uses"]} - {None}
    return bool(named & set(REAL_TARGETS) or any("@" in name for name in named)
                or set(row["fixtures"]) & REAL_ENGINE_FIXTURES or set(row["by_hand"]) & REAL_ENGINE_MARKS)


def test_real_is_on_exactly_the_tests_that_use_a_real_engine_or_say_so(collected):
    wrong = [row["id"] for row in collected.values()
             if (uses_a_real_engine(row) or "real" in row["by_hand"]) != ("real" in row["tiers"])]
    assert not wrong, f"{len(wrong)} items with a wrong real marker, e.g. {wrong[:5]}"
    for tier in ("tests/patched/", "tests/gateway/test_gateway_real.py", "tests/client/test_real_native.py"):
        assert any(i.startswith(tier) and "real" in r["tiers"] for i, r in collected.items()), tier


def test_no_real_mark_by_hand_where_it_is_derived(collected):
    redundant = [row["id"] for row in collected.values() if "real" in row["by_hand"] and uses_a_real_engine(row)]
    assert not redundant, redundant[:5]


def test_fake_and_stub_follow_the_target(collected):
    seen: dict[str, set] = {tier: set() for tier in TIERS}
    for row in collected.values():
        if row["target"] is None:
            continue
        expected = "real" if uses_a_real_engine(row) else "stub" if row["target"] == "stub" else "fake"
        assert row["tiers"] == [expected], row
        seen[expected].add(row["target"])
    assert seen["stub"] == {"stub"} and seen["real"] and seen["fake"], "the default run has targets of every tier"
    assert all(name in TARGETS and name not in REAL_TARGETS for name in seen["fake"]), seen["fake"]


def test_tests_without_a_target_have_no_tier_unless_they_need_an_engine(collected):
    plain = [r for r in collected.values() if r["target"] is None and not r["uses"]]
    assert any(r["id"].startswith("tests/unit/") for r in plain)
    tiered = [r["id"] for r in plain if r["tiers"] and not uses_a_real_engine(r) and "real" not in r["by_hand"]]
    assert not tiered, tiered[:5]


def test_not_real_selects_exactly_the_tests_that_need_no_real_engine(collected, tmp_path):
    quick = collect(tmp_path, "-m", "not real")
    assert set(quick) == {i for i, r in collected.items() if "real" not in r["tiers"]}
    assert not [i for i, r in quick.items() if uses_a_real_engine(r)]


class Options:
    """A config with just the ``--quick`` option."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick

    def getoption(self, name: str) -> bool:
        return {"quick": self.quick}[name]


def test_quick_lowers_rounds_and_the_full_run_keeps_them():
    assert rounds(Options(quick=False), 500) == 500
    assert 1 <= rounds(Options(quick=True), 500) < 500 and rounds(Options(quick=True), 1) == 1
