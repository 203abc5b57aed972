"""``python -m engine_plugins.testing.fake_vllm``: serve the fake vLLM with the real plugin."""

from .server import main

main()
