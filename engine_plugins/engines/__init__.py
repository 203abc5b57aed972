"""One adapter per engine (sglang/, vllm/, and stub/, an idealised engine), and what checks them.

Only the adapters touch engine internals, each through the names its ``manifest`` lists and its
``facade`` reaches (checked by :mod:`engine_plugins.engines.engine_manifest` at startup, on each
release's wheel and on the fakes). ``patching`` finds and applies the engine patches shipped in
``engine_plugins/patches/``.
"""
