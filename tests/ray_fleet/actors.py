"""The Ray actors of the tests: those of examples/ray_actors.py (the stub, vLLM's AsyncLLM,
SGLang's Engine, each with :class:`ContractActor`) and a framework's class without the mixin,
made a contract server by ``with_contract``. Ray's workers import them by name (tests/ and
examples/ are on their path)."""

from __future__ import annotations

import os
from typing import Optional

from ray_actors import ACTORS, SGLangActor, StubActor, VLLMActor

__all__ = ["ACTORS", "FrameworkStubActor", "SGLangActor", "StubActor", "VLLMActor"]


class FrameworkStubActor:
    """A framework's actor class that cannot be edited, its engine under another name: made a
    contract server by ``with_contract(FrameworkStubActor, engine="llm")``."""

    def __init__(self, step_s: float = 0.005) -> None:
        self.step_s = step_s
        self.llm = None

    async def start(self) -> int:
        """Make the engine; the actor's pid."""
        from engine_plugins.engines.stub.engine import StubEngine

        self.llm = StubEngine(step_s=self.step_s)
        return os.getpid()

    async def reload_weights(self, path: Optional[str] = None) -> str:
        """The stub has no weights: nothing to load."""
        return "version-only (the stub has no weights)"

    async def shutdown(self) -> None:
        """Nothing to stop."""
