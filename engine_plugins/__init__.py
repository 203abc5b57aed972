"""engine-plugins: one HTTP control contract for RL rollouts on SGLang and vLLM.

Importing this package imports no engine; each engine's code is imported only inside its plugin
(:mod:`engine_plugins.sglang`, :mod:`engine_plugins.vllm`).
"""

from .hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]
