"""A fake of vLLM 0.32's AsyncLLM, its front end and its engine core (no vLLM needed), served as
vLLM's OpenAI server does: with the real vLLM plugin, or without it (``--no-plugin``)."""
