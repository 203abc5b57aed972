"""Servers without the plugin: SGLang's own routes (polled) and vLLM's dev-mode routes, detected
and driven with their real wire shapes, on the engines' fakes (tests/fakes) with ``--no-plugin``."""

import asyncio

import httpx
import pytest

from engine_plugins.client import Fleet, ServerClient, ServerError

from .helpers import wait_until

pytestmark = pytest.mark.anyio


# Long enough that no request finishes while a test arranges things (the fakes' context is 2048).
LONG = 1500


def _generate_sglang(http, url, n, prefix):
    return [asyncio.create_task(http.post(f"{url}/generate", json={"rid": f"{prefix}-{i}", "input_ids": [1, 2],
                                                                    "sampling_params": {"max_new_tokens": LONG, "ignore_eos": True}},
                                          timeout=120))
            for i in range(n)]


def _generate_vllm(http, url, n, prefix):
    # vLLM names the engine request cmpl-<request_id>-<prompt index>.
    return [asyncio.create_task(http.post(f"{url}/v1/completions", json={"request_id": f"{prefix}-{i}", "prompt": "x",
                                                                          "max_tokens": LONG, "ignore_eos": True}, timeout=120))
            for i in range(n)]


async def _running(server, n):
    """Until the engine reports *n* requests running, read as the client reads it."""
    async def check():
        return (await server.loads()).running >= n

    await wait_until(f"{n} requests running on {server.url}", check)


async def test_sglang_without_the_plugin_is_detected_and_drained_by_polling(fake_sglang):
    url = fake_sglang.url
    async with ServerClient(url) as server, httpx.AsyncClient() as http:
        found = await server.detection()
        assert found.flavor.value == "sglang-native" and found.version == "0.5.23"
        assert "without the plugin" in found.detail
        gens = _generate_sglang(http, url, 3, "s")
        await _running(server, 3)
        load = await server.loads()
        assert (load.running, load.total, load.source) == (3, 3, "sglang")
        events = []
        outcome = await server.abort_until_idle(timeout_s=20, progress=lambda *e: events.append(e))
        answers = [(await g).json() for g in gens]
    assert outcome.idle is True and outcome.in_flight == 0 and outcome.aborted is None
    assert "does not say how many" in outcome.note
    assert ("/abort_request", {"abort_all": True}) in fake_sglang.calls()
    assert all(a["meta_info"]["finish_reason"]["type"] == "abort" for a in answers)
    assert events[-1] == (url, "idle", 0)


async def test_sglang_version_bump_sends_abort_all_requests_false_and_keeps_requests(fake_sglang):
    url = fake_sglang.url
    async with ServerClient(url) as server, httpx.AsyncClient() as http:
        [gen] = _generate_sglang(http, url, 1, "v")
        await _running(server, 1)
        outcome = await server.update_weight_version("v2")
        assert fake_sglang.calls()[-1] == ("/update_weight_version", {"new_version": "v2", "abort_all_requests": False})
        assert not gen.done() and outcome.aborted == 0
        await server.abort(["v-0"])
        await gen
        await server.update_weight_version("v3", abort_all_requests=True)
    assert fake_sglang.calls()[-1] == ("/update_weight_version", {"new_version": "v3", "abort_all_requests": True})


async def test_sglang_abort_by_id_pause_keep_and_resume_use_native_routes(fake_sglang):
    async with ServerClient(fake_sglang.url) as server:
        outcome = await server.abort(["abc"], wait=True)
        assert ("/abort_request", {"rid": "abc"}) in fake_sglang.calls()
        assert "starts with" in outcome.note and "did not wait" in outcome.note
        paused = await server.pause("keep")
        assert fake_sglang.calls()[-1] == ("/pause_generation", {"mode": "retract"}) and paused.is_paused
        await server.resume()
        await server.pause("keep", clear_cache=False)
        assert fake_sglang.calls()[-1] == ("/pause_generation", {"mode": "in_place"})
        await server.resume()
        assert fake_sglang.calls()[-1] == ("/continue_generation", {})
        assert (await server.is_paused()).is_paused is None
        with pytest.raises(ServerError) as err:
            await server.partial_generate([1, 2])
    assert err.value.kind == "unsupported" and "plugin" in err.value.message


async def test_older_sglang_with_get_load_is_detected_and_polled(fake_sglang_legacy):
    url = fake_sglang_legacy.url
    async with ServerClient(url) as server, httpx.AsyncClient() as http:
        found = await server.detection()
        gens = _generate_sglang(http, url, 2, "l")
        await _running(server, 2)
        load = await server.loads()
        outcome = await server.abort_until_idle(timeout_s=20)
        await asyncio.gather(*gens)
    assert "/get_load" in found.detail and load.source == "sglang-legacy" and load.total == 2
    assert outcome.idle


async def test_vllm_dev_mode_is_detected_and_drained_through_pause_and_resume(fake_vllm):
    url = fake_vllm.url
    async with ServerClient(url) as server, httpx.AsyncClient() as http:
        found = await server.detection()
        assert found.flavor.value == "vllm-native" and found.version == "0.32.0"
        gens = _generate_vllm(http, url, 3, "q")
        await _running(server, 3)
        load = await server.loads()
        assert (load.running, load.waiting, load.source) == (3, 0, "vllm-metrics")
        outcome = await server.abort_until_idle(timeout_s=20)
        answers = [(await g).json() for g in gens]
        state = await server.is_paused()
    calls = fake_vllm.calls()
    assert [c[0] for c in calls] == ["/abort_requests", "/pause", "/resume"]
    assert calls[0][1] == {} and calls[1][1] == {"mode": "abort", "clear_cache": False}
    assert outcome.idle and outcome.aborted == 3 and "drained with /pause?mode=abort" in outcome.note
    assert all(a["choices"][0]["finish_reason"] == "abort" for a in answers)
    assert state.is_paused is False, "the drain must not leave the server paused"


async def test_vllm_drain_leaves_a_paused_server_paused(fake_vllm):
    async with ServerClient(fake_vllm.url) as server:
        await server.pause("keep")
        assert fake_vllm.calls()[-1] == ("/pause", {"mode": "keep", "clear_cache": True})
        outcome = await server.abort_until_idle(timeout_s=10)
        assert outcome.idle and (await server.is_paused()).is_paused is True
        await server.resume()
        assert (await server.is_paused()).is_paused is False


async def test_vllm_version_reads_previous_and_abort_by_ids(fake_vllm):
    url = fake_vllm.url
    async with ServerClient(url) as server, httpx.AsyncClient() as http:
        gens = _generate_vllm(http, url, 2, "w")
        await _running(server, 2)
        bumped = await server.update_weight_version("v9")
        assert bumped.previous_version == "default" and bumped.aborted == 0 and not any(g.done() for g in gens)
        outcome = await server.abort(["cmpl-w-1-0"], wait=True)
        assert fake_vllm.calls()[-1] == ("/abort_requests", {"request_ids": ["cmpl-w-1-0"]})
        assert "ids requested" in outcome.note
        assert (await gens[1]).json()["choices"][0]["finish_reason"] == "abort" and not gens[0].done()
        bumped = await server.update_weight_version("v10", abort_all_requests=True)
        await gens[0]
    assert bumped.previous_version == "v9" and bumped.aborted == 1


async def test_vllm_without_dev_mode_says_what_to_set(fake_vllm_no_dev):
    async with Fleet([fake_vllm_no_dev.url]) as fleet:
        result = await fleet.abort_until_idle(5)
    r = result.results[0]
    assert r.kind == "unsupported" and "VLLM_SERVER_DEV_MODE=1" in r.error and "VLLM_PLUGINS=engine_plugins" in r.error


async def test_a_mixed_fleet_reports_what_each_server_is(fake_sglang, fake_vllm):
    async with Fleet([fake_sglang.url, fake_vllm.url]) as fleet:
        found = await fleet.detect()
        drained = await fleet.abort_until_idle(10)
    assert [r.value.flavor.value for r in found.results] == ["sglang-native", "vllm-native"]
    assert drained.ok
