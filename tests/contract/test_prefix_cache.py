"""The prefix cache is scoped by weight version (docs/contract.md, "Prefix cache scoped by weight version"): after a bump no request
reuses KV computed before it, while requests of one version still share their prefix, on the
contract's route and on each engine's own generation route, with the caller's salt keeping its
meaning. Every count is the engine's own: ``cached_tokens`` of ``/partial_generate`` (SGLang's
``meta_info.cached_tokens``, vLLM's ``num_cached_tokens``), SGLang's ``meta_info`` on
``/generate``, and vLLM's ``vllm:prefix_cache_hits`` counter around a ``/v1/completions``.
"""

from __future__ import annotations

import random
import uuid
from typing import Any, Optional

import pytest

from targets import ENGINE_TARGETS, stub_server
from targets_sglang import sglang_fake_server
from targets_vllm import fake_vllm_server

from .api import Api, engine_of
from .metrics import scrape, total

pytestmark = pytest.mark.anyio

# Long enough to fill several of vLLM's 128-token blocks on the CPU (only whole blocks are cached).
PROMPT_TOKENS = 600


def fresh_prompt() -> list[int]:
    """A prompt no earlier request of the session shares a block with (ids well inside any
    tiny model's vocabulary)."""
    rng = random.Random(uuid.uuid4().int)
    return [rng.randrange(5, 250) for _ in range(PROMPT_TOKENS)]


async def contract_cached(api: Api, prompt: list[int]) -> int:
    """The engine's cached-token count of one ``/partial_generate`` of *prompt* (the contract's
    route takes no salt of the caller's)."""
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 1}}
    answer = await api.ok("POST", "/partial_generate", body)
    assert answer["cached_tokens"] is not None, answer
    return answer["cached_tokens"]


async def native_cached(api: Api, prompt: list[int], salt: Optional[str] = None) -> int:
    """The engine's cached-token count of one request of *prompt* on the engine's own route,
    with the caller's own salt (SGLang's ``extra_key``, vLLM's ``cache_salt``) if given."""
    engine = engine_of(api.target)
    if engine == "sglang":
        body: dict[str, Any] = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 1}}
        if salt is not None:
            body["extra_key"] = salt
        answer = await api.ok("POST", "/generate", body)
        return answer["meta_info"]["cached_tokens"]
    model = (await api.ok("GET", "/v1/models"))["data"][0]["id"]
    body = {"model": model, "prompt": prompt, "max_tokens": 1}
    if salt is not None:
        body["cache_salt"] = salt
    before = total(await scrape(api, "vllm:"), "vllm:prefix_cache_hits_total")
    await api.ok("POST", "/v1/completions", body)
    return int(total(await scrape(api, "vllm:"), "vllm:prefix_cache_hits_total") - before)


async def bump(api: Api) -> None:
    """A contract version bump to a name this server never had."""
    await api.ok("POST", "/update_weight_version", {"new_version": f"prefix-{uuid.uuid4().hex[:8]}"})


async def ranks(api: Api) -> int:
    """How many data-parallel ranks (each with a cache of its own) the server spreads requests over."""
    return len((await api.loads())["loads"])


async def _scoped_by_version(api: Api, cached) -> None:
    # One request more than there are ranks: at least one lands on a rank that has the prompt.
    tries = await ranks(api) + 1
    prompt = fresh_prompt()
    within = [await cached(api, prompt) for _ in range(tries)]
    assert max(within[1:]) > 0, f"requests of one version did not share their prefix: {within}"
    await bump(api)
    assert await cached(api, prompt) == 0, "a request admitted after a bump reused KV computed before it"
    again = [await cached(api, prompt) for _ in range(tries - 1)]
    assert max(again) > 0, f"requests of the new version did not share their prefix: {again}"


async def test_the_contract_route_reuses_nothing_from_before_a_bump_and_shares_within_a_version(target):
    async with Api(target) as api:
        await _scoped_by_version(api, contract_cached)


@pytest.mark.targets(*ENGINE_TARGETS)
@pytest.mark.engine_routes
async def test_the_engines_own_route_reuses_nothing_from_before_a_bump_and_shares_within_a_version(target):
    async with Api(target) as api:
        await _scoped_by_version(api, native_cached)


@pytest.mark.targets(*ENGINE_TARGETS)
@pytest.mark.engine_routes
async def test_the_callers_own_salt_keeps_its_meaning_within_a_version(target):
    async with Api(target) as api:
        tries = await ranks(api) + 1
        prompt = fresh_prompt()
        salted = [await native_cached(api, prompt, salt="caller-a") for _ in range(tries)]
        assert max(salted[1:]) > 0, f"one salt, one version: no sharing: {salted}"
        assert await native_cached(api, prompt, salt="caller-b") == 0, "another salt shared the cache"
        assert await native_cached(api, prompt) == 0, "a request without a salt shared a salted request's cache"
        await bump(api)
        assert await native_cached(api, prompt, salt="caller-a") == 0, "the caller's salt reused KV from before the bump"


# The plugin's adapters on each engine's fake, and the stub, started with the scoping turned off.
UNSCOPED = {
    "stub": lambda tmp, env: stub_server(tmp, env=env),
    "sglang-stub": lambda tmp, env: sglang_fake_server(tmp, env=env),
    "vllm-stub": lambda tmp, env: fake_vllm_server(tmp, env=env),
}


@pytest.mark.parametrize("kind", sorted(UNSCOPED))
async def test_with_the_scoping_turned_off_a_request_after_a_bump_reuses_the_cache(tmp_path, kind):
    with UNSCOPED[kind](tmp_path, {"ENGINE_PLUGINS_SCOPE_PREFIX_CACHE": "0"}) as target:
        async with Api(target) as api:
            cached = native_cached if engine_of(target) else contract_cached
            prompt = fresh_prompt()
            await cached(api, prompt)
            before = await cached(api, prompt)
            await bump(api)
            assert before > 0 and await cached(api, prompt) == before
