"""The supported engine releases (requirements/engine-versions.txt) and where their wheels are
unpacked (scripts/setup-engines.sh wheels), for the static probe and the per-version targets."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Release:
    """One supported release: engine, version, its wheel (``dist==version``), how it is tested."""

    engine: str
    version: str
    wheel: str
    tested: str
    """``pinned`` (full suite, real), ``real`` (smoke subset, real) or ``probe`` (static only)."""

    def __str__(self) -> str:
        return f"{self.engine}@{self.version}"


def _read() -> list[Release]:
    lines = (REPO / "requirements" / "engine-versions.txt").read_text().splitlines()
    return [Release(*line.split()[:4]) for line in lines if line.strip() and not line.startswith("#")]


SUPPORTED: list[Release] = _read()


def wheels_dir() -> Path:
    """Where setup-engines.sh keeps the wheels (same rule as the script)."""
    override = os.environ.get("ENGINE_PLUGINS_WHEELS_DIR")
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "engine-plugins" / "wheels"


def wheel_source(release: Release) -> Path:
    """The unpacked .py files of *release*'s wheel."""
    dist = release.wheel.split("==")[0].replace("-", "_")
    return wheels_dir() / "src" / f"{dist}-{release.version}"
