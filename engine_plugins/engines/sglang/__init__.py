"""The SGLang plugin: the contract on SGLang's own HTTP server (SGLang 0.5.20 to 0.5.23).

- :mod:`.plugin`: the ``sglang.srt.plugins`` entry point that puts the parts together;
- :mod:`.engine_names`: every SGLang name the plugin uses, imported lazily and checked at startup;
- :mod:`.seam`: the :class:`~engine_plugins.core.seam.EngineSeam` over the TokenizerManager;
- :mod:`.tracking`: keeps the in-flight registry exact, through hooks in SGLang's hook registry;
- :mod:`.routes`: mounts the contract's routes on SGLang's FastAPI app, replacing same-path natives.

Importing this package imports no SGLang module.
"""
