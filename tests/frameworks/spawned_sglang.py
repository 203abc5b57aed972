"""SGLang started as slime, miles and NeMo-RL start it: from a Ray actor, a ``multiprocessing``
child with the ``spawn`` start method running
``sglang.srt.entrypoints.http_server.launch_server(server_args)``.

    python -m frameworks.spawned_sglang [the flags of python -m sglang.launch_server]

Sources (each framework's launch function, the same three steps):

- THUDM/slime at 03b32d8baeb8932ccac1d20151f1474ec07651bb,
  ``slime/backends/sglang_utils/sglang_engine.py:51-66`` (``launch_server_process``, called by the
  ``SGLangEngine`` Ray actor's ``init`` -> ``_init_normal``): ``set_start_method("spawn", force=True)``,
  the host's IPv6 brackets stripped, ``multiprocessing.Process(target=launch_server, args=(server_args,))``,
  then ``/health_generate`` polled every 2 s until it answers 200; ``shutdown`` ends with
  ``kill_process_tree`` of that child;
- miles ``miles/backends/sglang_utils/sglang_engine.py:70-75``: the same;
- NeMo-RL ``nemo_rl/models/generation/sglang/sglang_worker.py:83-95``: ``mp.Process(target=http_server.launch_server)``.

This process is the framework's driver (:mod:`frameworks.ray_host`): it starts Ray, creates the
actor and calls its ``init``. The frameworks build ``ServerArgs`` from a dict; the actor here parses
the flags into it.
"""

from __future__ import annotations

import sys
import time


class SGLangEngine:
    """slime's ``SGLangEngine`` actor, reduced to its launch and shutdown."""

    def init(self, argv: list[str]) -> None:
        """Spawn SGLang's HTTP server and wait until it generates."""
        import multiprocessing

        import httpx
        from sglang.srt.entrypoints.http_server import launch_server
        from sglang.srt.server_args import prepare_server_args

        server_args = prepare_server_args(argv)
        multiprocessing.set_start_method("spawn", force=True)
        server_args.host = server_args.host.strip("[]")
        self.process = multiprocessing.Process(target=launch_server, args=(server_args,))
        self.process.start()
        headers = {"Authorization": f"Bearer {server_args.api_key}"} if server_args.api_key else {}
        while True:
            try:
                if httpx.get(f"{server_args.url()}/health_generate", headers=headers, timeout=30).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if not self.process.is_alive():
                raise RuntimeError("Server process terminated unexpectedly.")
            time.sleep(2)

    def shutdown(self) -> None:
        """End the server's process tree, as slime's ``shutdown`` does."""
        from sglang.srt.utils import kill_process_tree

        kill_process_tree(self.process.pid)


def main() -> None:
    """Start Ray, create the actor, launch SGLang from it and hold it until stopped."""
    from frameworks.ray_host import hold_until_stopped, start_ray

    ray = start_ray()
    # slime asks its placement group for the engine's GPUs; here the actor takes no CPU of Ray's
    # (SGLang's own processes use the cores).
    engine = ray.remote(num_cpus=0)(SGLangEngine).remote()
    ray.get(engine.init.remote(sys.argv[1:]))
    hold_until_stopped(lambda: ray.get(engine.shutdown.remote(), timeout=30))


if __name__ == "__main__":
    main()
