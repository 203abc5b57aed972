"""How a real engine on a small CPU-only machine shares its cores with the client that drives it.

One place for the settings the demo, the tests and the measurement script all use. A profile is
the environment, the cores and the priority an engine server's process tree starts with, and the
cores its client runs on. ``ENGINE_PLUGINS_CPU_PROFILE`` picks one for every server the launcher
starts (default :data:`DEFAULT_PROFILE`); docs/cpu-tuning.md has the measurements behind them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping, Optional

PROFILE_ENV = "ENGINE_PLUGINS_CPU_PROFILE"


@dataclass(frozen=True)
class CpuProfile:
    """The environment, cores and niceness of an engine's process tree, and where its client runs.

    Cores are indices into the machine's online cores (:func:`machine_cores`), counted from the
    end when negative, so that a profile means the same on a machine whose core ids do not start
    at 0.
    """

    description: str
    niceness: int = 10
    env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per engine ("vllm", "sglang", or "*" for both): variables added to the server's environment."""
    engine_cores: Optional[tuple[int, ...]] = None
    """The cores of the engine's whole process tree; None leaves the affinity alone."""
    client_cores: Optional[tuple[int, ...]] = None
    """The cores of the process driving the engine (the test session, the demo); None: any."""

    def environment(self, engine: str) -> dict[str, str]:
        """The variables this profile sets for `engine`, with core placeholders resolved."""
        merged = {**self.env.get("*", {}), **self.env.get(engine, {})}
        cores = ",".join(str(c) for c in sorted(self.resolve(self.engine_cores) or ()))
        return {name: value.replace("{engine_cores}", cores) for name, value in merged.items()}

    @staticmethod
    def resolve(indices: Optional[tuple[int, ...]]) -> Optional[set[int]]:
        """The CPU ids for core `indices`, or None when no placement is asked for or possible.

        None also when the machine has a single usable core: there is nothing to split.
        """
        if indices is None:
            return None
        usable = machine_cores()
        if len(usable) < 2:
            return None
        return {usable[i] for i in indices if -len(usable) <= i < len(usable)}

    def place_engine(self) -> None:
        """Run in the server's child before exec: its priority and cores, inherited by its tree."""
        os.nice(self.niceness)
        cores = self.resolve(self.engine_cores)
        if cores:
            os.sched_setaffinity(0, cores)

    def place_client(self) -> Optional[set[int]]:
        """Moves the calling process to the client's cores; returns them (None: left alone)."""
        cores = self.resolve(self.client_cores)
        if cores:
            os.sched_setaffinity(0, cores)
        return cores


def machine_cores() -> list[int]:
    """The machine's online CPU ids, whatever this process's own affinity (it may be a client's)."""
    try:
        spec = open("/sys/devices/system/cpu/online").read().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cores: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        cores.extend(range(int(low), int(high or low) + 1))
    return cores


# One compute thread per engine, bound to the engine's core: vLLM's CPU worker takes its OpenMP
# binding from VLLM_CPU_OMP_THREADS_BIND (else it binds itself and leaves the other core to its
# busy engine-core loop); SGLang's torch_native path uses one OpenMP thread per core unless told.
# OMP_WAIT_POLICY=passive: a thread that finished its part of a parallel region sleeps instead of
# spinning (libgomp spins by default), so a waiting engine thread does not hold a core.
_ONE_THREAD = {
    "*": {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive", "KMP_BLOCKTIME": "0"},
    "vllm": {"VLLM_CPU_OMP_THREADS_BIND": "{engine_cores}"},
}

PROFILES: dict[str, CpuProfile] = {
    "engine-default": CpuProfile(
        "the engines' own thread settings, the server niced by 10 (what the launcher did first)",
    ),
    "engine-one-core": CpuProfile(
        "the whole engine tree on the first core with one compute thread; the client anywhere",
        env=_ONE_THREAD, engine_cores=(0,),
    ),
    "split-cores": CpuProfile(
        "the whole engine tree on the first core with one compute thread; the client on the last",
        env=_ONE_THREAD, engine_cores=(0,), client_cores=(-1,),
    ),
}
# Measured side by side on two cores (docs/cpu-tuning.md): with the engine tree free to use both
# cores, vLLM's engine-core busy loop shares the second core with the client, which stalled for
# up to 6 s; on one core the loop yields to the worker, decode speed is unchanged and the client's
# worst stall was tens of ms.
DEFAULT_PROFILE = "engine-one-core"


def selected_profile(name: str | None = None) -> tuple[str, CpuProfile]:
    """The profile named `name`, or by ``ENGINE_PLUGINS_CPU_PROFILE``, or the default.

    Raises ValueError naming the variable and the known profiles for an unknown name.
    """
    chosen = name or os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE
    if chosen not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={chosen!r} is not a CPU profile; known: {', '.join(sorted(PROFILES))}")
    return chosen, PROFILES[chosen]
