"""The plugin host: settings, plugin loading, hook calls, tracing, the contract's HTTP routes.

Puts the core and the plugins together for one engine (:mod:`engine_plugins.host.assembly`).
"""
