"""The vLLM plugin (vLLM 0.26 to 0.34): the contract on vLLM's own OpenAI server, over ``AsyncLLM``.

- :mod:`.plugin`: the ``vllm.endpoint_plugins`` and ``vllm.general_plugins`` entry points;
- :mod:`.manifest`: every vLLM name the plugin uses, the supported releases and their differences (data);
- :mod:`.facade`: vLLM's objects as the plugin reaches them, imported lazily, with the shims;
- :mod:`.engine_core`: what the general plugin installs in vLLM's engine-core process;
- :mod:`.seam`: the :class:`~engine_plugins.core.seam.EngineSeam` over the ``AsyncLLM``;
- :mod:`.tracking`: keeps the in-flight registry exact, by wrapping the engine client's entry points;
- :mod:`.routes`: mounts the contract's routes on vLLM's app, replacing same-path natives.

Importing this package imports no vLLM module.
"""
