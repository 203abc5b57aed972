"""Prefix-cache keys scoped by weight version: no request reuses KV computed under other weights.

Both engines key their prefix cache by the prompt's tokens and, optionally, a salt the request
carries (vLLM's ``cache_salt``, SGLang's ``extra_key``): requests with different salts never
share a cached block. The engine adapters give every request the salt of the weight-version
generation it was admitted under (the server's count of bumps, :mod:`engine_plugins.core.versions`,
so that a version name used twice does not share) and of its name, combined with the salt the
caller sent, so that the caller's salt keeps its meaning. Requests of one version share the cache as before; a
request admitted after a bump never hits a block computed before it; the old version's blocks
age out through the engine's own eviction, and no flush is needed.

``ENGINE_PLUGINS_SCOPE_PREFIX_CACHE=0`` turns it off (docs/contract.md, "Prefix cache scoped by weight version").
"""

from __future__ import annotations

import hashlib
from typing import Optional

# vLLM's HTTP layer refuses a cache_salt longer than 128 characters or holding '@', '/', '\' or
# NUL (docs/engine-notes.md, "vLLM"); a salt of this shape passes every such check, whatever the
# caller's salt was.
_DIGEST_CHARS = 32


def version_salt(caller_salt: Optional[str], generation: int, version: str = "", weight_loads: int = 0) -> str:
    """The prefix-cache salt of a request admitted under weight-version *generation* (named
    *version*) after *weight_loads* weight loads, whose caller sent *caller_salt* (None or
    empty: no salt of its own). A load that names no version (an engine's own update route)
    scopes the cache anew as a bump does.

    The name is in it too: the API processes of one vLLM server share one cache, and a process
    that missed a bump (it failed one spread) counts its generations one lower from then on, so
    that a generation alone could name another version there.

    Equal for equal arguments, different when any differs; under 60 characters of
    ``[a-z0-9-]`` (for fewer than 10**20 bumps).
    """
    key = f"{generation}\x00{version}\x00{caller_salt or ''}" + (f"\x00{weight_loads}" if weight_loads else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:_DIGEST_CHARS]
    return f"ep-wv{generation}-{digest}"
