"""The contract for engines held in-process: ``control = engine_plugins.inprocess.attach(engine)``.

For the frameworks that hold the engine as a Python object (verl, OpenRLHF, NeMo-RL, ROLL): the
same operations, defaults, errors and hooks as the contract's routes, and
:class:`~.ray_actor.ContractActor` to reach an engine in a Ray actor from a
:class:`~engine_plugins.client.Fleet`.
"""

from engine_plugins.inprocess.attach import attach
from engine_plugins.inprocess.control import EngineControl
from engine_plugins.inprocess.ray_actor import ContractActor, contract_http, with_contract

__all__ = ["ContractActor", "EngineControl", "attach", "contract_http", "with_contract"]
