"""The SGLang plugin: the contract on SGLang 0.5.23's own HTTP server.

- :mod:`.engine_api`: every SGLang name the plugin touches, imported lazily and checked at startup;
- :mod:`.tracking`: keeps the in-flight registry exact on SGLang's TokenizerManager;
- :mod:`.adapter`: the :class:`~engine_plugins.seam.EngineSeam` over the TokenizerManager;
- :mod:`.routes`: mounts the contract's routes on SGLang's FastAPI app, replacing same-path natives;
- :mod:`.plugin`: the ``sglang.srt.plugins`` entry point that puts them together.

Importing this package imports no SGLang module.
"""
