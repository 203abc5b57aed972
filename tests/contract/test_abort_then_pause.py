"""An abort with wait that a pause keep follows at once still returns, without a resume.

The soak found this race on SGLang: an abort marks a running request, the scheduler would return
it at its next step, and a keep pause that arrives before that step froze the scheduler with the
aborted request inside, so the abort's wait ran until someone resumed. An abort answered with
``wait`` must not depend on a later resume, whatever control call follows it.
"""

import asyncio

import pytest

from tiers import rounds as quick_rounds

from .api import Api

pytestmark = pytest.mark.anyio

TIMEOUT_S = 20


@pytest.mark.parametrize("gap_s", [0.0, 0.001, 0.003])
async def test_a_keep_pause_right_behind_an_abort_with_wait_does_not_hold_the_aborted_request(target, gap_s, pytestconfig):
    rounds = quick_rounds(pytestconfig, 3 if target.real else 20, target.name)
    async with Api(target) as api:
        await api.warm(4)
        for i in range(rounds):
            keep_running = asyncio.create_task(api.generate(target.long_tokens, request_id=f"kept-{gap_s}-{i}"))
            aborted = asyncio.create_task(api.generate(target.long_tokens, request_id=f"cut-{gap_s}-{i}"))
            await api.wait_in_flight(2, running=True)

            async def pause_soon() -> dict:
                await asyncio.sleep(gap_s)
                return await api.ok("POST", "/pause", {"mode": "keep"})

            abort, pause = await asyncio.gather(
                api.ok("POST", "/abort_requests", {"request_ids": [f"cut-{gap_s}-{i}"], "wait": True, "timeout_s": TIMEOUT_S}),
                pause_soon(),
            )
            assert abort["timed_out"] is False and abort["aborted"] == 1, (i, abort, pause)
            result = await aborted
            assert result["cancelled"] is True and result["finish_reason"] == "abort", result
            assert not keep_running.done(), "the request the abort did not name is kept by the pause"
            await api.ok("POST", "/resume")
            await api.ok("POST", "/abort_requests", {"wait": True, "timeout_s": TIMEOUT_S})
            kept = await keep_running
            assert kept["cancelled"] is True, kept
