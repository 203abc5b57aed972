"""A fake of vLLM 0.32's AsyncLLM (no vLLM needed), served with the real vLLM plugin for tier-1 tests."""
