"""``make demo DEPLOY=ray``: the demo's loop against engines held in-process by Ray actors, reached
through ``Fleet([actor_handle])`` instead of an HTTP server.

The loop runs where Ray is: the engine's interpreter, with Ray on its path (the development venv
has no Ray), so ``rl_demo.py --deploy ray`` runs itself again there (:func:`rerun_in_engine`)
and prints the report that run hands back. The actor is ``ray_actors``' (vLLM's AsyncLLM or
SGLang's Engine, with ``ContractActor``); the weight load is the engine's own in-place reload from
the trainer's checkpoint, an actor method the trainer calls beside the fleet (:func:`ray_load`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any, AsyncIterator

from engine_plugins.client import ServerClient

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def rerun_in_engine(engine: str, argv: list[str]) -> int:
    """Run ``rl_demo.py *argv*`` in *engine*'s interpreter with Ray, this checkout and examples/
    on its path; its exit code."""
    from tools.launcher.engine_server import EngineServer, ensure_engine, ray_dir

    paths = ensure_engine(engine, REPO, ray=True)
    code_path = os.pathsep.join([str(REPO), str(HERE), str(ray_dir())])
    env = EngineServer(engine, REPO, env={"PYTHONPATH": code_path}).environment()
    return subprocess.run([str(paths.python), str(HERE / "rl_demo.py"), *argv], env=env, cwd=REPO).returncode


async def ray_load(server: ServerClient, path: str) -> object:
    """The checkpoint at *path* into the engine of *server*'s actor: its own in-place reload."""
    return await server.transport.handle.reload_weights.remote(path)


@contextlib.asynccontextmanager
async def engine_actors(engine: str, model: str, n: int = 1) -> AsyncIterator[list[Any]]:
    """*n* Ray actors (``<engine>-<i>``) holding *engine* on the weights at *model*, started; a
    Ray cluster of their own, stopped on leaving."""
    from ray_actors import ACTORS, start_ray

    ray = start_ray()
    handles: list[Any] = []
    try:
        for i in range(n):
            # num_cpus=0: two cores hold the loop, the trainer, the actor and the engine's processes.
            handles.append(ray.remote(num_cpus=0)(ACTORS[engine]).options(name=f"{engine}-{i}").remote(model, "auto"))
        for handle in handles:
            await handle.start.remote()
        yield handles
    finally:
        for handle in handles:
            with contextlib.suppress(Exception):  # one that failed to start
                await handle.shutdown.remote()
        ray.shutdown()
