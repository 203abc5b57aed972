"""SGLang started as slime, miles and NeMo-RL start it: a ``multiprocessing`` child, with the
``spawn`` start method, running ``sglang.srt.entrypoints.http_server.launch_server(server_args)``.

    python -m frameworks.spawned_sglang [the flags of python -m sglang.launch_server]

Sources (each framework's launch function, the same three steps):

- THUDM/slime at 03b32d8baeb8932ccac1d20151f1474ec07651bb,
  ``slime/backends/sglang_utils/sglang_engine.py:51-58`` (``launch_server_process``, called by the
  ``SGLangEngine`` Ray actor's ``_init_normal``): ``set_start_method("spawn", force=True)``, the
  host's IPv6 brackets stripped, ``multiprocessing.Process(target=launch_server, args=(server_args,))``;
- miles ``miles/backends/sglang_utils/sglang_engine.py:70-75``: the same;
- NeMo-RL ``nemo_rl/models/generation/sglang/sglang_worker.py:83-95``: ``mp.Process(target=http_server.launch_server)``.

This process stands for the framework's Ray actor: like a Ray worker it has no ``multiprocessing``
parent of its own, and its child does. It parses the flags into ``ServerArgs`` (the frameworks
build theirs from a dict) and waits for its child, ending with it.
"""

from __future__ import annotations

import multiprocessing
import sys


def main() -> None:
    """Start SGLang's HTTP server as a spawned child and wait for it."""
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(sys.argv[1:])
    multiprocessing.set_start_method("spawn", force=True)
    server_args.host = server_args.host.strip("[]")
    child = multiprocessing.Process(target=launch_server, args=(server_args,))
    child.start()
    child.join()
    sys.exit(child.exitcode or 0)


if __name__ == "__main__":
    main()
