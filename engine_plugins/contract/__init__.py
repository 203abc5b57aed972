"""The contract: the operations (hookspecs), the wire JSON (schema), the errors, and the Control protocol.

Imports nothing else of this package: every other layer, and every plugin, builds on it.
"""
