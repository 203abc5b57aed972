"""The toy prefix caches of the SGLang fake, the vLLM fake and the stub engine, driven directly.

Each keys its cache by a namespace or salt: requests of one namespace share their prefixes,
others share nothing; a hit leaves at least one prompt token to compute; the vLLM fake and the
stub count whole blocks of 16 tokens only. Each reports the hit where its engine does (SGLang's
``meta_info["cached_tokens"]``, vLLM's ``RequestOutput.num_cached_tokens``, the seam's
``Generation.cached_tokens``), and the object a plugin rescopes is the one the cache reads.
"""

from __future__ import annotations

import pytest

from engine_plugins.core.cache_scope import version_salt
from engine_plugins.contract.schema import SamplingParams
from engine_plugins.engines.stub.engine import PrefixCache, StubEngine
from fakes.sglang.io_struct import GenerateReqInput
from fakes.sglang.scheduler import FakeRadixCache
from fakes.sglang.tokenizer_manager import TokenizerManager
from fakes.vllm import engine as vllm_fake

pytestmark = pytest.mark.anyio

PROMPT = list(range(3, 43))  # 40 tokens: two full blocks of 16 and 8 more


# --- SGLang fake ---------------------------------------------------------------------------------


def test_radix_cache_matches_the_longest_prefix_in_its_namespace_only() -> None:
    cache = FakeRadixCache()
    cache.insert([1, 2, 3, 4, 5], extra_key="a")
    cache.insert([1, 2, 9], extra_key="a")
    assert cache.match_prefix([1, 2, 3, 4, 7], extra_key="a") == 4
    assert cache.match_prefix([1, 2, 9, 9], extra_key="a") == 3
    assert cache.match_prefix([1, 2, 3, 4, 5], extra_key="b") == 0
    assert cache.match_prefix([1, 2, 3, 4, 5], extra_key="a", cache_salt="s") == 0
    assert cache.match_prefix([1, 2, 3, 4, 5]) == 0


def test_radix_cache_evicts_the_least_recently_used_prompt() -> None:
    cache = FakeRadixCache(max_prompts=2)
    cache.insert([1, 1])
    cache.insert([2, 2])
    assert cache.match_prefix([1, 1]) == 2  # [1, 1] is now the most recent
    cache.insert([3, 3])
    assert cache.match_prefix([2, 2]) == 0
    assert cache.match_prefix([1, 1]) == 2 and cache.match_prefix([3, 3]) == 2


async def _sglang_generate(tm: TokenizerManager, **fields) -> list[dict]:
    obj = GenerateReqInput(input_ids=list(PROMPT), sampling_params={"max_new_tokens": 3, "ignore_eos": True},
                           stream=True, **fields)
    return [out async for out in tm.generate_request(obj)]


async def test_sglang_fake_reports_cached_tokens_on_every_output_capped_below_the_prompt() -> None:
    tm = TokenizerManager(step_s=0.001)
    try:
        first = await _sglang_generate(tm)
        again = await _sglang_generate(tm)
        keyed = await _sglang_generate(tm, extra_key="k")
        salted = await _sglang_generate(tm, extra_key="k", cache_salt="s")
        keyed_again = await _sglang_generate(tm, extra_key="k")
    finally:
        for task in tm._tasks:
            task.cancel()
    assert [o["meta_info"]["cached_tokens"] for o in first] == [0, 0, 0]
    assert [o["meta_info"]["cached_tokens"] for o in again] == [len(PROMPT) - 1] * 3
    assert {o["meta_info"]["cached_tokens"] for o in keyed + salted} == {0}
    assert {o["meta_info"]["cached_tokens"] for o in keyed_again} == {len(PROMPT) - 1}


async def test_sglang_fake_dispatches_what_create_tokenized_object_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hook around ``_create_tokenized_object`` that rescopes ``extra_key`` (as the plugin's) takes effect."""
    original = TokenizerManager._create_tokenized_object
    salts = iter(["gen-0", "gen-0", "gen-1"])

    def rescoped(self, obj, *args, **kwargs):
        tokenized = original(self, obj, *args, **kwargs)
        tokenized.extra_key = next(salts)
        return tokenized

    monkeypatch.setattr(TokenizerManager, "_create_tokenized_object", rescoped)
    tm = TokenizerManager(step_s=0.001)
    try:
        outs = [(await _sglang_generate(tm))[-1]["meta_info"]["cached_tokens"] for _ in range(3)]
    finally:
        for task in tm._tasks:
            task.cancel()
    assert outs == [0, len(PROMPT) - 1, 0]


# --- vLLM fake -----------------------------------------------------------------------------------


def _core_request(ids: list[int], salt: str | None = None) -> vllm_fake._CoreRequest:
    request = vllm_fake.EngineCoreRequest("r", ids, vllm_fake.SamplingParams(), cache_salt=salt)
    return vllm_fake._CoreRequest(request, rng=None, block_hashes=vllm_fake.request_block_hashes(request))


def _admit(cache: vllm_fake.KVCacheManager, ids: list[int], salt: str | None = None) -> int:
    core_request = _core_request(ids, salt)
    hit = cache.get_computed_blocks(core_request)
    cache.cache_blocks(core_request)
    cache.record_prefix_cache_stats(core_request, hit)
    return hit


def test_vllm_fake_counts_whole_blocks_only_and_never_the_whole_prompt() -> None:
    cache = vllm_fake.KVCacheManager()
    assert _admit(cache, PROMPT) == 0
    assert _admit(cache, PROMPT) == 32  # two full blocks; the 8 tokens after them are not a block
    assert _admit(cache, PROMPT[:20] + [500] * 20) == 16  # diverges inside the second block
    assert _admit(cache, PROMPT[:32]) == 16  # both blocks cached, but the last token is recomputed
    assert _admit(cache, PROMPT[:15]) == 0  # no full block
    assert (cache.queries, cache.hits) == (40 + 40 + 40 + 32 + 15, 32 + 16 + 16)


def test_vllm_fake_salt_changes_every_block() -> None:
    cache = vllm_fake.KVCacheManager()
    _admit(cache, PROMPT, salt="a")
    assert _admit(cache, PROMPT) == 0
    assert _admit(cache, PROMPT, salt="b") == 0
    assert _admit(cache, PROMPT, salt="a") == 32


def test_vllm_fake_evicts_the_least_recently_used_blocks() -> None:
    cache = vllm_fake.KVCacheManager(num_blocks=2)
    _admit(cache, PROMPT)
    _admit(cache, [7] * 33)
    assert _admit(cache, PROMPT) == 0


async def test_vllm_fake_reads_the_salt_set_on_the_request_before_the_core_gets_it() -> None:
    """The plugin wraps ``engine_core.add_request_async`` on the instance and salts the request
    before calling the original; the hits and ``num_cached_tokens`` follow that salt."""
    llm = vllm_fake.AsyncLLM(step_s=0.001)
    salts = iter(["gen-0", "gen-0", "gen-1"])
    original = llm.engine_core.add_request_async

    async def salted(request):
        request.cache_salt = next(salts)
        await original(request)

    llm.engine_core.add_request_async = salted
    llm.start()
    try:
        cached = []
        for i in range(3):
            params = vllm_fake.SamplingParams(max_tokens=3)
            (prompt,) = await llm.renderer.render_cmpl_async([vllm_fake.TokensPrompt(prompt_token_ids=PROMPT)])
            cached.append([out.num_cached_tokens async for out in llm.generate(prompt, params, f"r{i}")])
    finally:
        await llm.shutdown()
    assert cached == [[0, 0, 0], [32, 32, 32], [0, 0, 0]]
    manager = llm.engine_core.core.scheduler.kv_cache_manager
    assert (manager.queries, manager.hits) == (3 * len(PROMPT), 32)


async def test_vllm_fake_takes_the_salt_from_the_prompt() -> None:
    renderer = vllm_fake.Renderer(max_model_len=2048)
    (rendered,) = await renderer.render_cmpl_async([{"prompt_token_ids": [1, 2], "cache_salt": "s"}])
    assert rendered["cache_salt"] == "s"


async def test_vllm_fake_server_takes_cache_salt_and_counts_on_metrics() -> None:
    from argparse import Namespace

    import httpx

    from fakes.vllm.server import create_app

    llm = vllm_fake.AsyncLLM(step_s=0.001)
    app = create_app(Namespace(step_s=0.001, api_key=None), llm=llm, plugin=False)
    llm.start()  # the app's lifespan would
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            for salt in ("a", "a", "b"):
                body = {"prompt": PROMPT, "max_tokens": 2, "cache_salt": salt}
                assert (await http.post("/v1/completions", json=body)).status_code == 200
            for bad in ("", "a/b", "x" * 129):
                assert (await http.post("/v1/completions", json={"prompt": PROMPT, "cache_salt": bad})).status_code == 400
            metrics = (await http.get("/metrics")).text
    finally:
        await llm.shutdown()
    labels = '{engine="0",model_name="fake-vllm"}'
    assert f"vllm:prefix_cache_queries_total{labels} {3.0 * len(PROMPT)}" in metrics
    assert f"vllm:prefix_cache_hits_total{labels} 32.0" in metrics


# --- the stub ------------------------------------------------------------------------------------


def test_stub_prefix_cache_blocks_and_salts() -> None:
    cache = PrefixCache()
    assert cache.admit(PROMPT, "a") == 0
    assert cache.admit(PROMPT, "a") == 32
    assert cache.admit(PROMPT, "b") == 0
    assert cache.admit(PROMPT, None) == 0
    assert cache.admit(PROMPT[:32], "a") == 16
    assert cache.admit(PROMPT[:20] + [9] * 5, "a") == 16


async def _stub_cached(engine: StubEngine, rid: str) -> set:
    params = SamplingParams(max_new_tokens=3)
    return {g.cached_tokens async for g in engine.generate(rid, list(PROMPT), params)}


@pytest.mark.parametrize("scope", [{}, {"scope_prefix_cache": True}], ids=["default", "on"])
async def test_stub_scopes_its_cache_by_the_generation_admitted_under(scope) -> None:
    engine = StubEngine(step_s=0.001, **scope)
    assert await _stub_cached(engine, "a") == {0}
    assert await _stub_cached(engine, "b") == {32}
    engine.registry.generation += 1  # a bump
    assert await _stub_cached(engine, "c") == {0}
    assert await _stub_cached(engine, "d") == {32}
    assert version_salt(None, 0) != version_salt(None, 1)


async def test_stub_shares_across_generations_when_scoping_is_off() -> None:
    engine = StubEngine(step_s=0.001, scope_prefix_cache=False)
    assert await _stub_cached(engine, "a") == {0}
    engine.registry.generation += 1
    assert await _stub_cached(engine, "b") == {32}


def test_stub_server_takes_scoping_from_its_settings() -> None:
    """``ENGINE_PLUGINS_SCOPE_PREFIX_CACHE`` reaches the engine a stub app builds itself; a stub
    engine made without the flag scopes (the served stub, :func:`~engine_plugins.engines.stub.server.main`,
    passes the setting: ``tests/contract/test_prefix_cache.py`` serves one with it off)."""
    from engine_plugins.host.config import load_settings
    from engine_plugins.engines.stub.server import create_app

    app = create_app(None, load_settings({"ENGINE_PLUGINS_SCOPE_PREFIX_CACHE": "0", "ENGINE_PLUGINS_PLUGINS": ""}))
    built = app.state.plugin_stack.hooks._get_control().seam  # the control is built on first use
    assert built.scope_prefix_cache is False and StubEngine().scope_prefix_cache is True
