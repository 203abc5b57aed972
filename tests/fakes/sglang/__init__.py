"""A fake of SGLang 0.5.23's TokenizerManager, scheduler, HTTP server and hook registry, faithful
to the semantics the SGLang plugin relies on, so that the plugin's real code can be served and
tested without SGLang; served with the plugin, or without it (``--no-plugin``).

Each behaviour cites the SGLang source it follows (paths under ``sglang/srt/``). The fake keeps
SGLang's quirks on purpose: prefix-matching aborts, fire-and-forget aborts that a scheduler
which has not seen the rid drops, the pause gate after the request's state is created, stream
chunks that share the TokenizerManager's lists, finish_reason dicts, and weight-version spans
on final outputs only.
"""
