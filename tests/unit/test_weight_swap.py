"""The weight swap's commit when a step fails: the resume follows anyway, and the error names the
step (a failed bump is what a stalled API process produces; here it is made to fail)."""

import asyncio

import pytest

from engine_plugins.core.control import RolloutControl
from engine_plugins.contract.errors import ContractError
from engine_plugins.engines.stub.engine import StubEngine
from engine_plugins.core.weight_swap import begin_weight_swap, commit_weight_swap

pytestmark = pytest.mark.anyio


async def test_a_failed_bump_still_resumes_and_says_which_step_failed():
    control = RolloutControl(StubEngine(step_s=0.001))
    began = await begin_weight_swap(control, "v2", "keep", False, lease_s=60)

    async def bump_fails(new_version, abort_all_requests):
        raise ContractError(503, "API process 1 of 2 gave no answer")

    control.update_weight_version = bump_fails
    with pytest.raises(ContractError) as raised:
        await commit_weight_swap(control, swap_id=began.swap_id)
    assert raised.value.status == 503
    assert raised.value.message == (f"weight swap {began.swap_id}: the version bump to 'v2' failed "
                                    "(API process 1 of 2 gave no answer); the server was resumed")
    assert control.is_paused().is_paused is False and control.open_weight_swap() is None


async def test_a_failed_resume_says_so_and_that_the_version_was_applied():
    control = RolloutControl(StubEngine(step_s=0.001))
    began = await begin_weight_swap(control, "v3", "abort", None, lease_s=60)

    async def resume_fails():
        raise ContractError(503, "API process 1 of 2 gave no answer")

    control.resume = resume_fails
    with pytest.raises(ContractError) as raised:
        await commit_weight_swap(control, version="v3")
    assert "the resume failed (API process 1 of 2 gave no answer); the version is 'v3'; resume again" in raised.value.message
    assert control.weight_version() == "v3" and control.is_paused().is_paused is True


async def test_two_begins_at_once_open_one_swap_and_the_other_is_a_409():
    control = RolloutControl(StubEngine(step_s=0.001))
    outcomes = await asyncio.gather(
        begin_weight_swap(control, "v4", "keep", False, lease_s=60),
        begin_weight_swap(control, "v5", "keep", False, lease_s=60),
        return_exceptions=True,
    )
    opened = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, ContractError)]
    assert len(opened) == 1 and len(refused) == 1 and refused[0].status == 409
    assert control.open_weight_swap().swap_id == opened[0].swap_id
    assert opened[0].swap_id in refused[0].message
