"""The order of weight versions (the order of bumps) and the registry's admission stamps."""

from engine_plugins.core.registry import InFlightRegistry
from engine_plugins.core.versions import WeightVersions


def test_generations_count_bumps_and_a_repeated_name_means_its_latest_bump():
    versions = WeightVersions("v0")
    assert (versions.current, versions.current_name) == (0, "v0")
    assert [versions.bump(name) for name in ("v1", "v2", "v1")] == [1, 2, 3]
    assert versions.generation_of("v1") == 3 and versions.generation_of("v2") == 2 and versions.generation_of("v0") == 0
    assert versions.generation_of("v9") is None
    assert [versions.name_of(g) for g in range(4)] == ["v0", "v1", "v2", "v1"]
    assert versions.staleness(1) == 2 and versions.staleness(3) == 0
    assert versions.recent_names() == ["v1", "v2", "v0"]


def test_entries_are_stamped_with_the_generation_they_were_admitted_under():
    registry = InFlightRegistry()
    registry.add("a")
    registry.generation = 1
    registry.add("b")
    registry.add("c")
    registry.generation = 2
    registry.add("a")  # an existing entry keeps its admission
    registry.add("d")
    assert {e.rid: e.admitted for e in registry.select()} == {"a": 0, "b": 1, "c": 1, "d": 2}
    assert [e.rid for e in registry.admitted_before(2)] == ["a", "b", "c"]
    assert registry.admitted_before(0) == []
    assert registry.by_admission() == {0: 1, 1: 2, 2: 1}
