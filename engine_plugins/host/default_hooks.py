"""The engine's own answers: every hook delegates to the engine's :class:`RolloutControl`.

Registered like any plugin (under the name ``engine``), with ``trylast`` so that every other
plugin is asked first and the engine answers only what they leave to it. Each returns the
control's coroutine; the dispatcher awaits it.
"""

from __future__ import annotations

from engine_plugins.core import weight_swap
from engine_plugins.contract.hookspecs import hookimpl

NAME = "engine"


@hookimpl(trylast=True)
def abort(control, request_ids, wait, timeout_s, reason):
    """Abort through the engine's control (see the hookspec)."""
    return control.abort(request_ids, wait, timeout_s, reason)


@hookimpl(trylast=True)
def loads(control):
    """Loads through the engine's control (see the hookspec)."""
    return control.loads()


@hookimpl(trylast=True)
def update_weight_version(control, new_version, abort_all_requests):
    """Version bump through the engine's control (see the hookspec)."""
    return control.update_weight_version(new_version, abort_all_requests)


@hookimpl(trylast=True)
def partial_generate(control, input_ids, sampling_params, request_id, max_staleness):
    """Partial generation through the engine's control (see the hookspec)."""
    return control.partial_generate(input_ids, sampling_params, request_id, max_staleness)


@hookimpl(trylast=True)
def pause(control, mode, timeout_s, clear_cache):
    """Pause through the engine's control (see the hookspec)."""
    return control.pause(mode, timeout_s, clear_cache)


@hookimpl(trylast=True)
def resume(control):
    """Resume through the engine's control (see the hookspec)."""
    return control.resume()


@hookimpl(trylast=True)
def is_paused(control):
    """Pause state from the engine's control (see the hookspec)."""
    return control.is_paused()


@hookimpl(trylast=True)
def begin_weight_swap(control, version, mode, clear_cache, lease_s, timeout_s):
    """A weight swap's begin through the engine's control (see the hookspec)."""
    return weight_swap.begin_weight_swap(control, version, mode, clear_cache, lease_s, timeout_s)


@hookimpl(trylast=True)
def commit_weight_swap(control, swap_id, version):
    """A weight swap's commit through the engine's control (see the hookspec)."""
    return weight_swap.commit_weight_swap(control, swap_id, version)
