"""vLLM's ``/wake_up`` resumes the scheduler whoever paused it (a colocated trainer's pause, sleep,
wake-up, weight load would generate before its load). With the plugin a contract pause holds
across it: the memory comes back and generation waits for the contract's resume."""

import asyncio
import uuid

import pytest

from contract.api import Api

pytestmark = [pytest.mark.anyio, pytest.mark.targets("vllm-stub-api3", "vllm-api2", "vllm-weights")]

# Long enough that a request the wake-up let through would have finished (4 tokens take well
# under a second on the CPU), short enough for the suite.
HELD_S = 3.0


@pytest.mark.parametrize("pause", ["/pause", "/weight_swap/begin"])
async def test_a_wake_up_leaves_a_contract_pause_in_place_until_its_resume(target, pause):
    async with Api(target) as api:
        if pause == "/pause":
            await api.ok("POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
        else:
            opened = await api.ok("POST", "/weight_swap/begin", {"version": f"sleep-{uuid.uuid4().hex[:8]}", "mode": "keep"})
        slept = await api.post("/sleep", params={"level": "0", "mode": "keep"})
        woken = await api.post("/wake_up", params={"tags": "scheduling"})
        waiting = asyncio.ensure_future(api.generate(4))
        await asyncio.sleep(HELD_S)
        held = not waiting.done()
        paused = await api.ok("GET", "/is_paused")
        if pause == "/pause":
            await api.ok("POST", "/resume")
        else:
            await api.ok("POST", "/weight_swap/commit", {"swap_id": opened["swap_id"]})
        result = await waiting
    assert slept.status_code == 200 and woken.status_code == 200, (slept.text, woken.text)
    assert woken.json()["status"] == "awake"
    assert held, "a request sent after the wake-up ran while the contract's pause held"
    assert paused["is_paused"] is True and paused["mode"] == "keep"
    assert result["finish_reason"] == "length" and len(result["output_ids"]) == 4


async def test_without_a_contract_pause_a_wake_up_resumes_as_vllm_does(target):
    async with Api(target) as api:
        await api.ok("POST", "/sleep", params={"level": "0", "mode": "keep"})
        await api.ok("POST", "/wake_up", params={"tags": "scheduling"})
        result = await asyncio.wait_for(api.generate(4), 120)
    assert result["finish_reason"] == "length" and len(result["output_ids"]) == 4
