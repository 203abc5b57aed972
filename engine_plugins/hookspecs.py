"""The operations every engine plugin implements (pluggy project ``engine_plugins``).

Each hook is ``firstresult``: the first implementation that returns something other than None
answers, and the HTTP route returns it. Hooks are called with keyword arguments only; an
implementation may accept fewer arguments than its spec. An implementation may return its
answer or an awaitable of it (the engines are asyncio servers); the caller awaits it.

An exception raised by an implementation becomes a 500 answer (logged with its traceback),
except :class:`engine_plugins.errors.ContractError`, whose status and message are sent as they
are (for example a 409 for a duplicate request id). None from every implementation is a 501:
no loaded plugin implements the operation on this engine.
"""

from __future__ import annotations

from typing import Optional

import pluggy

PROJECT = "engine_plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(firstresult=True)
def abort(request_ids: Optional[list[str]], wait: bool, timeout_s: float):
    """Abort requests; called by ``POST /abort_requests`` (and by pause, version bumps).

    ``request_ids``: exact request ids to abort, or None for every request the server has
    accepted and not finished, including those still tokenizing, held at a pause gate, queued or
    running. That is a fence: none of them may generate after the call. Unknown ids are not an
    error. ``wait``: return only once every covered request has finished and been released, or
    after ``timeout_s`` seconds. Returns :class:`engine_plugins.schema.AbortResult`.
    """


@hookspec(firstresult=True)
def loads():
    """Report the server's load; called by ``GET /v1/loads``.

    Returns :class:`engine_plugins.schema.LoadsResult` in SGLang's shape. The sum of
    ``num_total_reqs`` over ``loads`` must be 0 only when the server holds no request at all,
    including requests not yet in the scheduler.
    """


@hookspec(firstresult=True)
def update_weight_version(new_version: str, abort_all_requests: bool):
    """Set the weight version; called by ``POST /update_weight_version``.

    ``new_version``: the version tag of the weights now loaded. ``abort_all_requests``: abort
    every in-flight request first (already resolved from the request or the environment).
    Otherwise in-flight requests go on, and their later tokens carry ``new_version``.
    Returns :class:`engine_plugins.schema.UpdateWeightVersionResult`.
    """


@hookspec(firstresult=True)
def partial_generate(input_ids: list[int], sampling_params, request_id: Optional[str]):
    """Generate from token ids; called by ``POST /partial_generate``.

    ``sampling_params``: :class:`engine_plugins.schema.SamplingParams`. ``request_id``: the
    caller's id, usable in an abort; None to let the plugin choose one. Returns
    :class:`engine_plugins.schema.PartialGenerateResult` with every token generated and its
    logprob, also when the request is aborted or paused mid-way (``cancelled: true``). While the
    server is paused in ``abort`` mode it returns at once, cancelled, with no tokens. A request
    id that is already in flight raises ``ContractError(409)``.
    """


@hookspec(firstresult=True)
def pause(mode: str, timeout_s: float):
    """Pause generation; called by ``POST /pause``.

    ``mode``: ``"abort"``: in-flight generations return now with what they have (waiting up to
    ``timeout_s`` for them), and new ones return cancelled at once until resume. ``"keep"``:
    in-flight requests freeze and continue after resume; new ones wait. Pausing again changes the
    mode. Returns :class:`engine_plugins.schema.PauseState`.
    """


@hookspec(firstresult=True)
def resume():
    """Resume generation after a pause; called by ``POST /resume``. Harmless when not paused.

    Returns :class:`engine_plugins.schema.PauseState`.
    """


@hookspec(firstresult=True)
def is_paused():
    """Report the pause state; called by ``GET /is_paused``.

    Returns :class:`engine_plugins.schema.PauseState`.
    """
