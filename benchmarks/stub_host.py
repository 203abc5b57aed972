"""Many stub engines in one process: ``python -m benchmarks.stub_host --step-s S PORT...``.

Each port serves its own :class:`~engine_plugins.engines.stub.engine.StubEngine` with the contract, as
``python -m engine_plugins.engines.stub`` does, but all on one event loop: a fleet of 256 servers then
needs a few processes instead of 256 (each Python process takes about 60 MB).
"""

from __future__ import annotations

import argparse
import asyncio

import uvicorn

from engine_plugins.engines.stub.engine import StubEngine
from engine_plugins.engines.stub.server import create_app

from .common import KEY


async def serve(ports: list[int], step_s: float) -> None:
    """Serve one stub per port until stopped."""
    servers = [uvicorn.Server(uvicorn.Config(create_app(StubEngine(step_s=step_s, api_key=KEY)), host="127.0.0.1", port=p,
                                             log_level="warning", lifespan="off")) for p in ports]
    await asyncio.gather(*(s.serve() for s in servers))


def main() -> None:
    """Parse the ports and serve."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--step-s", type=float, default=0.004)
    parser.add_argument("ports", type=int, nargs="+")
    args = parser.parse_args()
    asyncio.run(serve(args.ports, args.step_s))


if __name__ == "__main__":
    main()
