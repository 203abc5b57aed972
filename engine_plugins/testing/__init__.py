"""Helpers for tests that drive the real engines (SGLang, vLLM) in their own virtualenvs."""
