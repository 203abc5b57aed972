"""``python -m engine_plugins.engines.stub``: serve the stub engine."""

from engine_plugins.engines.stub.server import main

main()
