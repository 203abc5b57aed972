"""Every contract route requires the API key when one is configured (the targets configure one)."""

import httpx
import pytest

pytestmark = pytest.mark.anyio

ROUTES = [
    ("POST", "/abort_requests"),
    ("POST", "/update_weight_version"),
    ("POST", "/partial_generate"),
    ("POST", "/pause"),
    ("POST", "/resume"),
    ("GET", "/v1/loads"),
    ("GET", "/is_paused"),
]


@pytest.mark.parametrize("method,path", ROUTES)
async def test_missing_or_wrong_key_is_401(target, method, path):
    async with httpx.AsyncClient(base_url=target.url, timeout=60) as http:
        missing = await http.request(method, path)
        wrong = await http.request(method, path, headers={"Authorization": "Bearer not-the-key"})
        state = await http.get("/is_paused", headers={"Authorization": f"Bearer {target.api_key}"})
    assert missing.status_code == 401 and wrong.status_code == 401
    assert state.json()["is_paused"] is False, "a refused call changes nothing"


async def test_right_key_is_accepted(target):
    async with httpx.AsyncClient(base_url=target.url, timeout=60) as http:
        response = await http.post("/resume", headers={"Authorization": f"Bearer {target.api_key}"})
    assert response.status_code == 200
