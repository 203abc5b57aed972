"""The update_weight_version hook through POST /update_weight_version."""

import pytest
from hook_app import assert_plugin_failure, deferring, plugin_with, raising, spy, stub_app

from engine_plugins.contract.errors import ContractError

pytestmark = pytest.mark.anyio


async def test_a_plugin_answers_and_the_engine_is_not_called():
    spy_plugin, calls = spy()

    def update_weight_version(new_version):
        return {"success": True, "new_version": new_version, "previous_version": "elsewhere", "aborted": 0}

    async with stub_app({"spy": spy_plugin, "answers": plugin_with("update_weight_version", update_weight_version)}) as stub:
        assert (await stub.ok("update_weight_version"))["previous_version"] == "elsewhere"
        assert (await stub.ok("loads"))["weight_version"] == "default", "the engine's version is unchanged"
    assert calls == ["loads"]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_plugin_defers_and_the_engine_bumps(is_async):
    seen = []
    async with stub_app({"defers": deferring("update_weight_version", is_async, seen)}) as stub:
        result = await stub.ok("update_weight_version", {"new_version": "v2"})
        assert result == {"success": True, "new_version": "v2", "previous_version": "default", "aborted": 0, "message": "Weight version updated to v2"}
        assert seen == [stub.control]


async def test_a_plugin_decorates_the_engines_bump():
    async def update_weight_version(control, new_version, abort_all_requests):
        result = await control.update_weight_version(f"run7/{new_version}", abort_all_requests)
        return {**result.model_dump(), "requested": new_version}

    async with stub_app({"decorates": plugin_with("update_weight_version", update_weight_version)}) as stub:
        result = await stub.ok("update_weight_version", {"new_version": "v2"})
        assert result["new_version"] == "run7/v2" and result["requested"] == "v2"
        assert (await stub.ok("loads"))["weight_version"] == "run7/v2"


async def test_a_plugin_that_raises_is_a_500_naming_it(caplog):
    async with stub_app({"broken": raising("update_weight_version", RuntimeError("boom"))}) as stub:
        await assert_plugin_failure(stub, "update_weight_version", caplog)


async def test_a_contract_error_keeps_its_status():
    def update_weight_version(new_version):
        raise ContractError(400, f"new_version: expected 'step-<n>' (got {new_version!r})")

    async with stub_app({"checks": plugin_with("update_weight_version", update_weight_version)}) as stub:
        response = await stub.call("update_weight_version")
    assert response.status_code == 400 and "step-<n>" in response.json()["error"]["message"]
