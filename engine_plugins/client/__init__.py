"""The RL side: an async client for one server or a fleet, speaking the contract, SGLang's own
routes or vLLM's dev-mode routes (detected), plus partial rollouts that survive cancels.

::

    async with Fleet(["http://10.0.0.1:30000", "http://10.0.0.2:30000"], api_key=key) as fleet:
        drained = await fleet.abort_until_idle(timeout_s=60)
        bumped = await fleet.update_weight_version("step-42")
        fenced = await fleet.abort_stale(max_staleness=2, wait=True)   # too old for the trainer

``Fleet(urls)`` is a :class:`ServerFleet`, ``Fleet(gateway=url)`` a :class:`GatewayFleet` (the
workers behind smg); both are :class:`FleetLike`.
"""

from engine_plugins.client.detect import Detection, Flavor
from engine_plugins.client.errors import ServerError
from engine_plugins.client.fleet import Fleet, FleetLike
from engine_plugins.client.fleet_results import FleetResult, ServerResult, WeightSwapRun
from engine_plugins.client.gateway_fleet import GatewayFleet
from engine_plugins.client.loads import Load, LoadParseError, parse_loads, parse_vllm_metrics
from engine_plugins.client.polling import Deadline
from engine_plugins.client.results import AbortOutcome, PauseOutcome, StaleSelector, VersionOutcome
from engine_plugins.client.rollout import Attempt, Rollout, run_rollout, tokens_per_version
from engine_plugins.client.server import ServerClient
from engine_plugins.client.server_fleet import ServerFleet

__all__ = [
    "AbortOutcome", "Attempt", "Deadline", "Detection", "Fleet", "FleetLike", "FleetResult", "Flavor", "GatewayFleet",
    "Load", "LoadParseError", "PauseOutcome", "Rollout", "ServerClient", "ServerError", "ServerFleet", "ServerResult",
    "StaleSelector", "VersionOutcome", "WeightSwapRun", "parse_loads", "parse_vllm_metrics", "run_rollout",
    "tokens_per_version",
]
