"""One adapter per engine (sglang/, vllm/, and stub/, an idealised engine), and what checks them.

Only the adapters touch engine internals, each through the names its ``engine_names`` module lists
(checked by :mod:`engine_plugins.engines.probe`). ``patching`` finds and applies the engine patches
shipped in ``engine_plugins/patches/``.
"""
