"""Prometheus metrics for the contract, as a plugin written the way a third party would write one.

It is its own entry point (``metrics`` in the group ``engine_plugins``, see ``pyproject.toml``),
loaded by default and left out when ``ENGINE_PLUGINS_PLUGINS`` does not name it, and it uses
nothing but the hooks' arguments (:mod:`.plugin`). Its metrics (:mod:`.instruments`) live in
prometheus_client's default registry, which both engines serve on their own ``/metrics``.
Without prometheus_client installed the plugin defers every hook and records nothing.
"""
