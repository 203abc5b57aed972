"""How a real engine on a small CPU-only machine shares its cores with the client that drives it.

One place for the settings the demo, the tests and the measurement script all use. A profile is
the environment and the priority an engine server starts with; ``ENGINE_PLUGINS_CPU_PROFILE``
picks one for every server the launcher starts (default :data:`DEFAULT_PROFILE`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

PROFILE_ENV = "ENGINE_PLUGINS_CPU_PROFILE"


@dataclass(frozen=True)
class CpuProfile:
    """The environment and niceness an engine's process tree starts with."""

    description: str
    niceness: int = 10
    env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per engine ("vllm", "sglang", or "*" for both): variables added to the server's environment."""

    def environment(self, engine: str) -> dict[str, str]:
        """The variables this profile sets for `engine`."""
        return {**self.env.get("*", {}), **self.env.get(engine, {})}


PROFILES: dict[str, CpuProfile] = {
    "engine-default": CpuProfile(
        "the engines' own thread settings, the server niced by 10 (what the launcher did first)",
    ),
}
DEFAULT_PROFILE = "engine-default"


def selected_profile(name: str | None = None) -> tuple[str, CpuProfile]:
    """The profile named `name`, or by ``ENGINE_PLUGINS_CPU_PROFILE``, or the default.

    Raises ValueError naming the variable and the known profiles for an unknown name.
    """
    chosen = name or os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE
    if chosen not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={chosen!r} is not a CPU profile; known: {', '.join(sorted(PROFILES))}")
    return chosen, PROFILES[chosen]
