"""The SGLang plugin: the contract on SGLang's own HTTP server (SGLang 0.5.16 to 0.5.23).

- :mod:`.plugin`: the ``sglang.srt.plugins`` entry point that puts the parts together;
- :mod:`.manifest`: every SGLang name the plugin uses and the supported releases (data, checked at startup);
- :mod:`.facade`: SGLang's objects as the plugin reaches them, imported lazily, with the shims;
- :mod:`.dp_controller`: what runs in SGLang's data-parallel controller process;
- :mod:`.seam`: the :class:`~engine_plugins.core.seam.EngineSeam` over the TokenizerManager;
- :mod:`.tracking`: keeps the in-flight registry exact, through hooks in SGLang's hook registry;
- :mod:`.version_labels`: each token's weight version, counted where SGLang labels none (0.5.16 to 0.5.18);
- :mod:`.routes`: mounts the contract's routes on SGLang's FastAPI app, replacing same-path natives.

Importing this package imports no SGLang module.
"""
