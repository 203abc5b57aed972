"""The operations every engine answers, as pluggy hooks (project ``engine_plugins``).

How a hook is called (:mod:`engine_plugins.host.dispatch`): its implementations are called one at a
time in pluggy's order (the last registered first; ``tryfirst`` before, ``trylast`` after the
others), each with keyword arguments only, and an implementation may accept fewer arguments
than its spec. An implementation may return its answer or an awaitable of it (the engines are
asyncio servers); the caller awaits it before going on. The first answer that is not None is the
route's answer; None lets the next implementation answer. So a plugin can:

- **answer**: return a result, and the implementations after it (the engine's last) are not called;
- **defer**: return None (or an awaitable of None) and let the next one answer;
- **decorate**: call ``control`` itself (``await control.abort(...)``) and return what it made of
  the result.

The engine's own answers (:mod:`engine_plugins.host.default_hooks`) are ``trylast`` implementations
registered like any plugin, before the others (so a plugin's own ``trylast`` implementation comes
after the engine's, and is never reached). Every hook receives ``control``, the engine's
:class:`~engine_plugins.core.control.RolloutControl` (ready: a hook is not called while the engine is
not, the route answers 503), and ``http_request``, the HTTP request (a Starlette ``Request``) that
led to the call, or None when nothing did: an in-process call (:mod:`engine_plugins.inprocess`, and
the engines' own in-process methods the plugin routes through the contract) calls the same hooks
with ``http_request=None``.

An exception raised by an implementation becomes a 500 answer naming the plugin (logged with its
traceback), except :class:`engine_plugins.contract.errors.ContractError`, whose status and message are sent
as they are (for example a 409 for a duplicate request id). None from every implementation is a
501: no loaded plugin implements the operation on this engine.
"""

from __future__ import annotations

from typing import Optional

import pluggy

PROJECT = "engine_plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(firstresult=True)
def abort(control, request_ids: Optional[list[str]], wait: bool, timeout_s: float, reason: str, http_request):
    """Abort requests; called by ``POST /abort_requests``, and by pause and version bumps.

    ``request_ids``: exact request ids to abort, or None for every request the server has
    accepted and not finished, including those still tokenizing, held at a pause gate, queued or
    running. That is a fence: none of them may generate after the call. Unknown ids are not an
    error. ``wait``: return only once every covered request has finished and been released, or
    after ``timeout_s`` seconds. ``reason``: ``"request"`` (a client's ``/abort_requests`` by ids
    or of everything), ``"stale"`` (a client's ``/abort_requests`` with a selector by age, or
    partial generations whose ``max_staleness`` a version bump reached), ``"pause"`` (a pause in
    ``abort`` mode) or ``"weight_version"`` (a version bump with ``abort_all_requests``). A
    selector by age arrives as the exact ids of the requests it covers (never None, which would
    be every request). For aborts the control makes itself (pause, version bumps) the control is
    inside its own ``pause`` or ``update_weight_version``, and ``http_request`` is that route's
    request; the stale aborts of a bump do not wait. Returns
    :class:`engine_plugins.contract.schema.AbortResult`.
    """


@hookspec(firstresult=True)
def loads(control, http_request):
    """Report the server's load; called by ``GET /v1/loads``.

    Returns :class:`engine_plugins.contract.schema.LoadsResult` in SGLang's shape. The sum of
    ``num_total_reqs`` over ``loads`` must be 0 only when the server holds no request at all,
    including requests not yet in the scheduler.
    """


@hookspec(firstresult=True)
def update_weight_version(control, new_version: str, abort_all_requests: bool, http_request):
    """Set the weight version; called by ``POST /update_weight_version``.

    ``new_version``: the version tag of the weights now loaded. ``abort_all_requests``: abort
    every in-flight request first (already resolved from the request or the environment; the
    control's abort goes through the ``abort`` hook with reason ``"weight_version"``).
    Otherwise in-flight requests go on, and their later tokens carry ``new_version``.
    Returns :class:`engine_plugins.contract.schema.UpdateWeightVersionResult`.
    """


@hookspec(firstresult=True)
def partial_generate(
    control, input_ids: list[int], sampling_params, request_id: Optional[str], max_staleness: Optional[int], http_request
):
    """Generate from token ids; called by ``POST /partial_generate``.

    ``sampling_params``: :class:`engine_plugins.contract.schema.SamplingParams`. ``request_id``: the
    caller's id, usable in an abort; None to let the plugin choose one. ``max_staleness``: abort
    the request once that many version bumps have happened since it was admitted (None: never);
    a plugin that decorates this hook passes it on to ``control.partial_generate``. Returns
    :class:`engine_plugins.contract.schema.PartialGenerateResult` with every token generated and its
    logprob, also when the request is aborted or paused mid-way (``cancelled: true``, and
    ``cancel_reason`` saying why). While the
    server is paused in ``abort`` mode it returns at once, cancelled, with no tokens. A request
    id that is already in flight raises ``ContractError(409)``. A client that hangs up cancels
    the call (``asyncio.CancelledError`` at the implementation's ``await``).
    """


@hookspec(firstresult=True)
def pause(control, mode: str, timeout_s: float, clear_cache: Optional[bool], http_request):
    """Pause generation; called by ``POST /pause``.

    ``mode``: ``"abort"``: in-flight generations return now with what they have (waiting up to
    ``timeout_s`` for them; the control's abort goes through the ``abort`` hook with reason
    ``"pause"``), and new ones return cancelled at once until resume. ``"keep"``: in-flight
    requests freeze and continue after resume; new ones wait. ``"wait"``: a drain: new requests
    wait, in-flight ones finish (the call returns once they have, or after ``timeout_s``).
    Pausing again changes the mode. ``clear_cache``: vLLM's flag, with vLLM's meaning on every
    engine (None: true); in ``keep`` mode true drops the frozen requests' KV and recomputes them
    on resume, false keeps it (:class:`engine_plugins.contract.schema.PauseRequest`). Returns :class:`engine_plugins.contract.schema.PauseState`.
    """


@hookspec(firstresult=True)
def resume(control, http_request):
    """Resume generation after a pause; called by ``POST /resume``. Harmless when not paused.

    Returns :class:`engine_plugins.contract.schema.PauseState`.
    """


@hookspec(firstresult=True)
def is_paused(control, http_request):
    """Report the pause state; called by ``GET /is_paused``.

    Returns :class:`engine_plugins.contract.schema.PauseState`.
    """


@hookspec(firstresult=True)
def begin_weight_swap(control, version: str, mode: str, clear_cache: Optional[bool], lease_s: float, timeout_s: float, http_request):
    """Begin a weight swap to ``version``; called by ``POST /weight_swap/begin``.

    Pauses as the ``pause`` hook's ``mode`` and ``clear_cache`` say (waiting up to ``timeout_s``
    in ``abort`` and ``wait`` mode) and records the swap, which holds the pause until its commit;
    after ``lease_s`` seconds without one it is reported expired (the server stays paused). A
    swap already open and not expired raises ``ContractError(409)``. The trainer then loads the
    weights with the engine's own update calls. Returns
    :class:`engine_plugins.contract.schema.WeightSwapResult` (``state: "open"``).
    """


@hookspec(firstresult=True)
def commit_weight_swap(control, swap_id: Optional[str], version: Optional[str], http_request):
    """Commit the open weight swap named by ``swap_id`` or by its ``version``; called by ``POST
    /weight_swap/commit``.

    Bumps to the swap's version (aborting nothing) and resumes, the resume also when the bump
    failed; an error names the step that failed. No open swap of that name raises
    ``ContractError(404)``. Returns :class:`engine_plugins.contract.schema.WeightSwapResult`
    (``state: "committed"``).
    """
