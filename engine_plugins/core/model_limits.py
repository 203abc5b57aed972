"""What the served model can take, checked before a request reaches the engine.

A token id outside the model's vocabulary reaches the embedding and, on SGLang, kills the
scheduler and with it every request on the server; a length past the context is refused by the
engines in ways that differ. The control checks every ``/partial_generate`` against the limits
its seam reads off the engine, so each refusal is the same 400 on every engine, names the field
and the limit, and touches nothing in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_plugins.contract.errors import ContractError
from engine_plugins.contract.schema import SamplingParams


@dataclass(frozen=True)
class ModelLimits:
    """The served model's vocabulary size (valid ids are ``0 .. vocab_size - 1``) and context length."""

    vocab_size: int
    context_length: int


def check_request(limits: ModelLimits, input_ids: list[int], params: SamplingParams) -> None:
    """Raises a 400 :class:`ContractError` naming the first field the model cannot take."""
    top = limits.vocab_size - 1
    for field, ids in (("input_ids", input_ids), ("sampling_params.stop_token_ids", params.stop_token_ids)):
        # min and max run in C: a long valid prompt costs no Python loop on the event loop.
        if ids and (min(ids) < 0 or max(ids) > top):
            i, token = next((i, t) for i, t in enumerate(ids) if not 0 <= t <= top)
            raise ContractError(400, f"{field}[{i}] = {token} is outside the model's vocabulary (token ids 0 to {top})")
    if len(input_ids) >= limits.context_length:
        raise ContractError(
            400, f"input_ids: {len(input_ids)} tokens do not fit the model's context length of "
            f"{limits.context_length} (at most {limits.context_length - 1}, leaving room for one new token)"
        )
    room = limits.context_length - len(input_ids)
    if params.max_new_tokens > room:
        raise ContractError(
            400, f"sampling_params.max_new_tokens = {params.max_new_tokens} does not fit the model's context "
            f"length of {limits.context_length} after {len(input_ids)} prompt tokens (at most {room})"
        )
