"""An engine stub: an idealised engine behind the same seam as SGLang and vLLM, for fast tests and
for situations a real engine cannot produce on demand (a request that will not release, say)."""
