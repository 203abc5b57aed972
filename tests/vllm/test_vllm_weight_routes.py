"""vLLM's weight and memory routes need the server's key with the plugin (vLLM's own key
middleware guards only /v1, /v2, /inference and /cohere)."""

import httpx
import pytest

from engine_plugins.engines.vllm.weight_routes import GUARDED_PATHS

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-stub", "vllm", "vllm-weights")]


async def test_the_weight_routes_refuse_a_caller_without_the_key(target):
    async with httpx.AsyncClient(base_url=target.url, timeout=30) as http:
        answers = {path: await http.post(path, json={}) for path in sorted(GUARDED_PATHS)}
        wrong = await http.post("/collective_rpc", json={"method": "reload_weights"}, headers={"Authorization": "Bearer nope"})
        keyed = await http.post("/reset_prefix_cache", headers={"Authorization": f"Bearer {target.api_key}"})
    for path, response in answers.items():
        assert response.status_code == 401, f"{path}: {response.status_code} {response.text}"
        assert "API key" in response.json()["error"]["message"]
    assert wrong.status_code == 401
    # With the key the call reaches vLLM: its own route where it serves one (dev mode), else its 404.
    assert keyed.status_code == (200 if target.name == "vllm-weights" else 404), keyed.text
