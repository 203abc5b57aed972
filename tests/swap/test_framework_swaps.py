"""Each framework's weight-swap sequence, as its code sends it, on a real engine with real weights
and the plugin: 2xx everywhere, the requests in flight kept (or returned with their tokens where
the framework pauses in abort mode), the probe equal to the new checkpoint's own output, and one
version everywhere the engine reports it.

Sources (each framework's repository, the files and lines named):
- slime: ``slime/backends/sglang_utils/sglang_engine.py`` (``pause_generation`` ``{}``, abort mode,
  :423-428; ``flush_cache``, :270-290) and ``update_weight_from_tensor.py:278-332`` (tensor chunks
  with ``flush_cache: false`` and the version, no session; continue).
- miles: ``miles/backends/sglang_utils/sglang_engine.py:623-648`` (pause ``retract``, flush,
  ``begin_weight_update``, chunks, ``update_weight_version {abort_all_requests: false}``,
  ``end_weight_update``, continue) and ``update_weight_from_tensor.py:250-321``.
- ROLL: ``roll/distributed/strategy/sglang_strategy.py:333-360`` (tensor update with
  ``flush_cache: false``, no pause, no session; then ``/flush_cache``).
- TRL 1.16: ``trl/experimental/async_grpo/async_grpo_trainer.py:1767-1799`` (``/pause?mode=keep``
  with no ``clear_cache``, the weight transfer, ``/resume``).
- vime: ``vime/backends/vllm_utils/vllm_engine.py`` (``/pause?mode=keep&clear_cache=false``,
  ``/reset_prefix_cache?reset_running_requests=false`` taken as done on any 200, the transfer,
  ``/resume``).
- AReaL (areal-project/AReaL @cbff54d6): ``areal/engine/fsdp_engine.py:1695-1724`` (pause, disk
  update, continue); ``areal/engine/sglang_remote.py`` (the pause is two calls,
  ``/pause_generation {}`` then ``{"mode": "in_place"}``, :339-364;
  ``/update_weights_from_disk {"model_path", "abort_all_requests": true}``, SGLang's defaults
  otherwise, :213-224; ``/continue_generation {}``, :366-368); ``areal/infra/remote_inf_engine.py``
  (the pauses, then a grace sleep, :1422-1442; the version only client-side, ``set_version``
  :624, stamped on each segment of a request, and an aborted request sent again with its tokens
  appended to the prompt, :978-1058).
- verl (verl-project/verl @1dda039b): ``verl/checkpoint_engine/base.py:506-558`` (abort, release
  the KV cache, the transfer, finalize, resume the KV cache, resume generation);
  ``verl/workers/rollout/sglang_rollout/async_sglang_server.py`` (abort is
  ``pause_generation {"mode": "abort"}``, :728-731; ``release_memory_occupation {"tags":
  ["kv_cache"]}`` and ``resume_memory_occupation`` alike, then ``flush_cache``, only with
  ``free_cache_engine``, :531-544; ``continue_generation``, :733-736; its version is
  ``global_steps`` in verl's server actor, :724-726); ``sglang_rollout.py:371-382`` (one
  ``/update_weights_from_tensor`` per 2 GB bucket, no session, SGLang's defaults: ``flush_cache``
  true, ``http_server_engine.py:758-788``; then ``/flush_cache``, retried, :815-846).
- NeMo-RL (NVIDIA-NeMo/RL @c53f730d, the refit of @3ecf72ec):
  ``nemo_rl/weight_sync/sglang_weight_synchronizer.py`` (``in_place`` refused, :80-84;
  ``_refit``: pause, flush, begin, the buckets, end, continue, :154-185);
  ``nemo_rl/models/generation/sglang/sglang_worker.py`` (``/pause_generation {"mode"}``, :357-363;
  ``/continue_generation {}``, :365-368; ``/begin_weight_update {}``, ``/end_weight_update {}``,
  :370-376; one ``GET /flush_cache``, any other status than 200 raising, :425-435; the tensor
  body, ``flush_cache`` false, :206-228); ``nemo_rl/models/policy/utils.py:744-797`` (each bucket
  with ``weight_version``, the worker's refit count as a string);
  ``examples/configs/grpo_math_1B_sglang.yaml:34`` (``pause_generation_mode: retract``).
- SkyRL (NovaSky-AI/SkyRL @a9564572): ``skyrl/backends/skyrl_train/workers/worker_dispatch.py:694-711``
  (not colocated: pause, the broadcast, resume, then ``increment_weight_version``, client-side:
  ``inference_servers/remote_inference_client.py:241-243``, the requests' ``cache_salt``);
  ``remote_inference_client.py`` (``/pause`` with ``mode=keep&clear_cache=false``, :985-1017;
  ``/resume``, :1011-1013; the transfer, ``/collective_rpc`` of its worker extension's
  ``skyrl_start_weight_update``, ``update_weights_nccl``, ``skyrl_finish_weight_update``,
  :1176-1270, sent by ``weight_sync/broadcast_strategy.py:164-177``);
  ``workers/fsdp/fsdp_worker.py:273-285`` (in fully async training no prefix-cache reset unless
  ``clear_kv_cache_on_weight_sync``, default false: ``skyrl/train/config/config.py:963``).
- prime-rl (PrimeIntellect-ai/prime-rl @559b4477): ``src/prime_rl/utils/client.py:253-320``
  (``/pause`` with ``mode=keep&clear_cache=false`` to every server, ``/update_weights
  {"weight_dir"}``, ``/resume`` in a ``finally``; no cache reset: the orchestrator salts each
  request with the policy version it started under, :286-288, ``orchestrator/dispatcher.py:520``);
  ``src/prime_rl/inference/vllm/server.py:83-87`` and ``worker/filesystem.py:28-55`` (its
  ``/update_weights`` loads the checkpoint folder into the model in place, layerwise).

Where the framework transfers weights over NCCL (TRL, vime, SkyRL: vLLM's weight-transfer engine
or SkyRL's own worker extension), which vLLM's CPU build cannot run, or through its own worker
extension (prime-rl's in-place load from a folder), the transfer is vLLM's in-place
``/collective_rpc reload_weights``; the calls around it are the framework's. On SGLang the tensors
go as ``send_tensors.py`` sends them (through shared memory instead of CUDA IPC, in one bucket,
SGLang's default ``load_format`` where NeMo-RL sends its ``flattened_bucket``). verl's SGLang
server calls the TokenizerManager in its own process; here the same calls go through SGLang's
routes of the same name.
"""

from __future__ import annotations

import asyncio

import pytest

from contract.api import Api
from frameworks.native import PROMPT_IDS, client, served_model, sglang_generate

from .helpers import probe, references, send_tensors, sglang_load, sglang_versions, vllm_reload, vllm_versions

pytestmark = pytest.mark.anyio

RUNNING = 4


async def flush(http) -> None:
    """SGLang's ``/flush_cache``, retried while SGLang refuses it (as slime and miles loop)."""
    for _ in range(60):
        if (await http.get("/flush_cache")).status_code == 200:
            return
        await asyncio.sleep(0.5)
    raise AssertionError("SGLang refused /flush_cache for 30 s")


@pytest.mark.targets("sglang-weights")
async def test_slimes_abort_pause_flush_and_sessionless_tensor_chunks(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        tasks = [sglang_generate(http, target.long_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        (await http.post("/pause_generation", json={})).raise_for_status()
        outputs = await asyncio.gather(*tasks)
        await flush(http)
        answers = await asyncio.to_thread(send_tensors, target, b, "slime-b", flush=False)
        (await http.post("/continue_generation", json={})).raise_for_status()
        after, _ = await probe(api)
        everywhere = await sglang_versions(api, http)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert [(x["route"], x["status"]) for x in answers] == [("/update_weights_from_tensor", 200)], answers
    for out in outputs:
        assert out["meta_info"]["finish_reason"]["type"] == "abort" and 0 < out["meta_info"]["completion_tokens"]
    assert after == ref_b and everywhere == {"slime-b"} and back == ref_a


@pytest.mark.targets("sglang-weights")
async def test_miles_retract_flush_and_a_session_with_its_own_bump(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        tasks = [sglang_generate(http, target.finish_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        (await http.post("/pause_generation", json={"mode": "retract"})).raise_for_status()
        await flush(http)
        answers = await asyncio.to_thread(send_tensors, target, b, "miles-b", session=True, bump="miles-b")
        (await http.post("/continue_generation", json={})).raise_for_status()
        outputs = await asyncio.gather(*tasks)
        after, _ = await probe(api)
        everywhere = await sglang_versions(api, http)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert [x["status"] for x in answers] == [200, 200, 200, 200], answers
    for out in outputs:
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "length" and meta["completion_tokens"] == target.finish_tokens
        assert meta["weight_versions"][-1]["version"] == "miles-b"
    assert after == ref_b and everywhere == {"miles-b"} and back == ref_a


@pytest.mark.targets("sglang-weights")
async def test_rolls_unpaused_tensor_update_then_its_flush(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        tasks = [sglang_generate(http, target.finish_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        answers = await asyncio.to_thread(send_tensors, target, b, flush=False)
        outputs = await asyncio.gather(*tasks)
        await flush(http)
        after, _ = await probe(api)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert [x["status"] for x in answers] == [200], answers
    for out in outputs:
        assert out["meta_info"]["finish_reason"]["type"] == "length"
    assert after == ref_b and back == ref_a


def tokens_of(out: dict) -> list[int]:
    """An answer's tokens as AReaL reads them (``meta_info.output_token_logprobs``, ``x[1]``)."""
    return [x[1] for x in out["meta_info"]["output_token_logprobs"]]


@pytest.mark.targets("sglang-weights")
async def test_areals_abort_then_in_place_pause_a_stock_disk_update_and_its_requests_sent_again(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        before = await sglang_versions(api, http)
        await probe(api)  # cached under A: a reuse after the swap would show
        # A batch of rollouts: prompts of their own, so that none shares another's cached prefix.
        prompts = [[3 + i, *PROMPT_IDS] for i in range(RUNNING)]
        tasks = [sglang_generate(http, target.finish_tokens, input_ids=prompt) for prompt in prompts]
        await api.wait_in_flight(RUNNING, running=True)
        # No grace sleep after the pauses: the plugin's abort pause answers once the requests are out.
        calls = [await http.post("/pause_generation", json=body) for body in ({}, {"mode": "in_place"})]
        cut = await asyncio.gather(*tasks)
        await sglang_load(http, b, abort_all_requests=True)  # no version: AReaL keeps its own
        calls.append(await http.post("/continue_generation", json={}))
        # AReaL sends an aborted request again, its tokens appended to the prompt.
        again = await asyncio.gather(*(
            sglang_generate(http, target.finish_tokens - len(tokens_of(out)), input_ids=prompt + tokens_of(out))
            for prompt, out in zip(prompts, cut)))
        after, cached = await probe(api)
        everywhere = await sglang_versions(api, http)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert [c.status_code for c in calls] == [200, 200, 200], [c.text for c in calls]
    for out, rest in zip(cut, again):
        assert out["meta_info"]["finish_reason"]["type"] == "abort" and 0 < len(tokens_of(out)) < target.finish_tokens
        meta = rest["meta_info"]
        assert meta["finish_reason"]["type"] == "length" and len(tokens_of(out)) + meta["completion_tokens"] == target.finish_tokens
        assert meta["cached_tokens"] == 0, "the request sent again reuses no KV of its prefix from before the update"
    assert after == ref_b and cached == 0
    assert len(before) == 1 and everywhere == before, "no version sent: the engine's is unchanged, everywhere"
    assert back == ref_a


@pytest.mark.targets("sglang-weights")
async def test_verls_abort_sessionless_tensor_update_flush_and_resume(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        before = await sglang_versions(api, http)
        await probe(api)  # cached under A
        tasks = [sglang_generate(http, target.long_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        calls = [await http.post("/pause_generation", json={"mode": "abort"})]
        cut = await asyncio.gather(*tasks)
        # The KV cache's release and resume are verl's only with free_cache_engine (its default):
        # SGLang's CPU build cannot release memory (release_memory_occupation synchronizes CUDA,
        # and the scheduler dies), so this is verl with free_cache_engine false, which skips both.
        answers = await asyncio.to_thread(send_tensors, target, b)  # SGLang's defaults: flush_cache true
        await flush(http)
        calls.append(await http.post("/continue_generation", json={}))
        after, cached = await probe(api)
        everywhere = await sglang_versions(api, http)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert [c.status_code for c in calls] == [200, 200], [c.text for c in calls]
    assert [(x["route"], x["status"]) for x in answers] == [("/update_weights_from_tensor", 200)], answers
    for out in cut:  # verl keeps them for its partial rollout
        assert out["meta_info"]["finish_reason"]["type"] == "abort" and 0 < out["meta_info"]["completion_tokens"]
    assert after == ref_b and cached == 0
    assert len(before) == 1 and everywhere == before, "verl's version lives in its server actor: SGLang's is unchanged"
    assert back == ref_a


@pytest.mark.targets("sglang-weights")
async def test_nemo_rls_retract_one_flush_and_its_own_session_with_its_refit_count_as_version(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: sglang_load(http, c))
        await probe(api)  # cached under A
        tasks = [sglang_generate(http, target.finish_tokens) for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        calls = [await http.post("/pause_generation", json={"mode": "retract"})]
        calls.append(await http.get("/flush_cache"))  # tried once: NeMo-RL raises on anything but a 200
        # Its first refit: the worker's count, "1", with every bucket, inside its own session.
        answers = await asyncio.to_thread(send_tensors, target, b, "1", session=True, flush=False)
        calls.append(await http.post("/continue_generation", json={}))
        outputs = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        everywhere = await sglang_versions(api, http)
        await sglang_load(http, a)
        back, _ = await probe(api)
    assert [c.status_code for c in calls] == [200, 200, 200], [c.text for c in calls]
    assert [x["status"] for x in answers] == [200, 200, 200], answers
    for out in outputs:  # retracted, then recomputed under B
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "length" and meta["completion_tokens"] == target.finish_tokens
        assert meta["weight_versions"][-1]["version"] == "1"
    assert after == ref_b and cached == 0 and everywhere == {"1"} and back == ref_a


@pytest.mark.targets("vllm-weights")
async def test_trls_keep_pause_recomputes_the_requests_under_the_new_weights(target):
    a, b = target.checkpoints
    async with Api(target) as api:
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        tasks = api.start(RUNNING, target.finish_tokens, prefix="trl")
        await api.wait_in_flight(RUNNING, running=True)
        paused = await api.post("/pause", params={"mode": "keep"})
        await vllm_reload(api, b)
        resumed = await api.post("/resume")
        results = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        await vllm_reload(api, a)
        back, _ = await probe(api)
    assert paused.json()["status"] == "paused" and resumed.json()["status"] == "resumed"
    for result in results:
        assert result["finish_reason"] == "length" and len(result["output_ids"]) == target.finish_tokens
    assert after == ref_b and cached == 0 and back == ref_a


@pytest.mark.targets("vllm-weights")
async def test_vimes_keep_pause_and_refused_cache_reset_leave_no_stale_prefix(target):
    a, b = target.checkpoints
    async with Api(target) as api:
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        await probe(api)  # cached under A
        tasks = api.start(RUNNING, target.long_tokens, prefix="vime")
        await api.wait_in_flight(RUNNING, running=True)
        await api.ok("POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
        reset = await api.post("/reset_prefix_cache", params={"reset_running_requests": "false"})
        await vllm_reload(api, b)
        await api.ok("POST", "/resume")
        after, cached = await probe(api)
        await api.ok("POST", "/abort_requests", {"wait": True})
        await asyncio.gather(*tasks)
        await vllm_reload(api, a)
        back, _ = await probe(api)
    assert reset.status_code == 200  # vLLM's 200, whatever it did: vime goes on
    assert after == ref_b and cached == 0, "no request after the reload reuses KV from before it"
    assert back == ref_a


@pytest.mark.targets("vllm-weights")
async def test_skyrls_keep_kv_pause_keeps_the_requests_and_leaves_no_stale_prefix(target):
    a, b = target.checkpoints
    async with Api(target) as api:
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        before = await vllm_versions(api)
        await probe(api)  # cached under A
        tasks = api.start(RUNNING, target.finish_tokens, prefix="skyrl")
        await api.wait_in_flight(RUNNING, running=True)
        paused = await api.post("/pause", params={"mode": "keep", "clear_cache": "false"})
        await vllm_reload(api, b)  # SkyRL's start, NCCL chunks, finish
        resumed = await api.post("/resume")
        results = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        everywhere = await vllm_versions(api)
        await vllm_reload(api, a)
        back, _ = await probe(api)
    assert (paused.status_code, paused.json()["status"]) == (200, "paused")
    assert (resumed.status_code, resumed.json()["status"]) == (200, "resumed")
    for result in results:  # kept, KV and all
        assert result["finish_reason"] == "length" and len(result["output_ids"]) == target.finish_tokens
    assert after == ref_b and cached == 0, "no request after the load reuses KV from before it"
    assert len(before) == 1 and everywhere == before, "SkyRL counts its version client-side only"
    assert back == ref_a


def prime_rl_complete(http, model: str, max_tokens: int, cache_salt: str) -> asyncio.Task:
    """A generation through vLLM's ``/v1/completions``, salted by the policy version it started
    under as prime-rl's orchestrator salts its requests (``dispatcher.py:520``), in the background."""

    async def run() -> dict:
        body = {"model": model, "prompt": list(PROMPT_IDS), "max_tokens": max_tokens, "ignore_eos": True, "cache_salt": cache_salt}
        response = await http.post("/v1/completions", json=body)
        assert response.status_code == 200, f"/v1/completions -> {response.status_code} {response.text}"
        return response.json()

    return asyncio.create_task(run())


@pytest.mark.targets("vllm-weights")
async def test_prime_rls_keep_kv_pause_its_in_place_load_and_resume_in_finally(target):
    a, b = target.checkpoints
    async with Api(target) as api, client(target) as http:
        ref_a, ref_b = await references(api, target, lambda c: vllm_reload(api, c))
        before = await vllm_versions(api)
        await probe(api)  # cached under A
        model = await served_model(http)
        tasks = [prime_rl_complete(http, model, target.finish_tokens, cache_salt="0") for _ in range(RUNNING)]
        await api.wait_in_flight(RUNNING, running=True)
        paused = await http.post("/pause", params={"mode": "keep", "clear_cache": "false"})
        try:
            await vllm_reload(api, b)  # prime-rl's /update_weights {"weight_dir"}: its worker loads the folder in place
        finally:
            resumed = await http.post("/resume")
        outputs = await asyncio.gather(*tasks)
        after, cached = await probe(api)
        everywhere = await vllm_versions(api)
        await vllm_reload(api, a)
        back, _ = await probe(api)
    assert (paused.status_code, paused.json()["status"]) == (200, "paused")
    assert (resumed.status_code, resumed.json()["status"]) == (200, "resumed")
    for out in outputs:
        assert out["choices"][0]["finish_reason"] == "length" and out["usage"]["completion_tokens"] == target.finish_tokens
    assert after == ref_b and cached == 0, "no request after the load reuses KV from before it"
    assert len(before) == 1 and everywhere == before, "prime-rl tells the engine no version"
    assert back == ref_a
