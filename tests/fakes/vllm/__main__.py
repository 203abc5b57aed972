"""``python -m fakes.vllm``: serve the fake vLLM with the real plugin."""

from .server import main

main()
