"""The vLLM 0.32 plugin: the contract on vLLM's own OpenAI server, over ``AsyncLLM``.

``plugin`` holds the entry points, ``seam`` the contract's seam on ``AsyncLLM``, and
``internals`` every vLLM internal the plugin touches (checked at startup). Importing this
package imports no vLLM.
"""
