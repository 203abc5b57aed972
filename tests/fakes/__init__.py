"""Fakes of the engines' internals (one per engine), for tests only: never shipped in the wheel.

Each fake follows its engine's source closely enough that the engine's real plugin code runs on
it, and serves the engine's native routes, with or without the plugin. Importable as ``fakes``
(``tests/`` is on the path of the test session and of the servers it starts).
"""
