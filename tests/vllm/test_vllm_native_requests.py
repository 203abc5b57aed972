"""vLLM's own routes go through the same registry: /v1/completions requests are counted in
/v1/loads and covered by an abort-all, and vLLM's --api-key middleware guards /v1/loads."""

import asyncio

import httpx
import pytest

from contract.api import Api, total_reqs

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm", "vllm-stub")]


async def test_native_completions_are_counted_and_aborted_by_abort_all(target):
    n = 4
    async with Api(target) as api:
        model = (await api.ok("GET", "/v1/models"))["data"][0]["id"]
        await api.warm(n)
        body = {"model": model, "prompt": [1, 15, 27, 33], "max_tokens": target.long_tokens, "ignore_eos": True}
        tasks = [asyncio.create_task(api.post("/v1/completions", body)) for _ in range(n)]
        loads = await api.wait_in_flight(n, running=True)
        assert loads["in_flight"] == total_reqs(loads) == n
        result = await api.ok("POST", "/abort_requests", {"wait": True})
        responses = await asyncio.gather(*tasks)
        after = await api.loads()
    assert result["aborted"] == n and result["idle"] is True
    for response in responses:
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] == "abort"
        assert 0 < response.json()["usage"]["completion_tokens"] < target.long_tokens
    assert after["in_flight"] == 0 and total_reqs(after) == 0


async def test_abort_by_id_reaches_a_native_request_by_its_vllm_id(target):
    async with Api(target) as api:
        model = (await api.ok("GET", "/v1/models"))["data"][0]["id"]
        body = {"model": model, "prompt": [1, 15, 27], "max_tokens": target.long_tokens, "ignore_eos": True}
        headers = {"X-Request-Id": "native-by-id"}
        task = asyncio.create_task(api.post("/v1/completions", body, headers=headers))
        await api.wait_in_flight(1)
        # vLLM names a completion's engine request cmpl-<X-Request-Id or random>-<prompt index>.
        result = await api.ok("POST", "/abort_requests", {"request_ids": ["cmpl-native-by-id-0"], "wait": True})
        response = await task
    if result["aborted"] == 0:
        pytest.fail(f"the native request was not found by its vLLM id; loads: {await Api(target).loads()}")
    assert result == {"status": "aborted", "aborted": 1, "in_flight": 0, "idle": True, "timed_out": False}
    assert response.json()["choices"][0]["finish_reason"] == "abort"


async def test_v1_loads_is_guarded_by_vllms_own_middleware_and_root_routes_by_the_plugin(target):
    async with httpx.AsyncClient(base_url=target.url, timeout=60) as http:
        loads = await http.get("/v1/loads", headers={"Authorization": "Bearer wrong"})
        root = await http.post("/abort_requests", headers={"Authorization": "Bearer wrong"})
    # vLLM's AuthenticationMiddleware answers {"error": "Unauthorized"} before any route runs.
    assert loads.status_code == 401 and loads.json() == {"error": "Unauthorized"}
    # /abort_requests is outside vLLM's guarded prefixes: the plugin's own check answers, in the
    # shape of vLLM's own errors on a path vLLM serves too.
    assert root.status_code == 401 and root.json()["error"]["type"] == "Unauthorized" and root.json()["error"]["code"] == 401
