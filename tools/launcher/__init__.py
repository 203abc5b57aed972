"""Real engine servers on loopback, for the demo and the tests: venvs, the tiny model, the process tree.

Imports only the standard library and httpx: the caller needs neither engine installed.
"""
