"""Who is calling the TokenizerManager, and which TokenizerManager a call is about.

- **The plugin's own calls.** The plugin hooks the TokenizerManager's ``pause_generation``,
  ``continue_generation``, ``abort_request`` and ``update_weight_version`` so that other
  callers get what the plugin's routes give (:mod:`.native_calls`); its own calls of them
  (:class:`~.facade.SGLangEngine`) must reach SGLang's originals. They are made inside
  :func:`own_call`, which the hooks read *when the method is called*: only the call itself is
  marked, not the tasks SGLang starts while it runs (a task copies the context it is made in,
  and SGLang starts its output loop on the first call that needs it).
- **The TokenizerManager of a call.** A server process has one, in SGLang's global state; an
  in-process ``sglang.Engine`` has one that is in no global state. :func:`acting_on` names the
  TokenizerManager a hook runs on for the contract calls made inside it, and the last one built
  in this process (:func:`note_built`) is the one of an in-process engine.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from typing import Any, Iterator, Optional

_own: contextvars.ContextVar[bool] = contextvars.ContextVar("engine_plugins_sglang_own_call", default=False)
_acting_on: contextvars.ContextVar[Optional[Any]] = contextvars.ContextVar("engine_plugins_sglang_tm", default=None)
# The TokenizerManager built last in this process (weakly: a shut-down engine's goes with it).
_built: Optional["weakref.ref[Any]"] = None


@contextlib.contextmanager
def own_call() -> Iterator[None]:
    """Within this block, a call of a hooked TokenizerManager method is the plugin's own: the
    hook passes it to SGLang's original. Wrap the call only, not the await of its coroutine."""
    token = _own.set(True)
    try:
        yield
    finally:
        _own.reset(token)


def is_own_call() -> bool:
    """Whether the hooked method being called was called by the plugin (:func:`own_call`)."""
    return _own.get()


@contextlib.contextmanager
def acting_on(tm: Any) -> Iterator[None]:
    """Within this block, the contract's calls are about the TokenizerManager *tm* (a hook on
    one of its methods runs)."""
    token = _acting_on.set(tm)
    try:
        yield
    finally:
        _acting_on.reset(token)


def acted_on() -> Optional[Any]:
    """The TokenizerManager a hook is running on (:func:`acting_on`), or None."""
    return _acting_on.get()


def note_built(tm: Any) -> None:
    """SGLang has built the TokenizerManager *tm* in this process."""
    global _built
    _built = weakref.ref(tm)


def last_built() -> Optional[Any]:
    """The TokenizerManager built last in this process, while it lives; else None."""
    return None if _built is None else _built()
