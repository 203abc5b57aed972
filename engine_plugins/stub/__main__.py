"""``python -m engine_plugins.stub``: serve the stub engine."""

from .server import main

main()
