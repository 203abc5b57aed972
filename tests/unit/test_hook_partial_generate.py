"""The partial_generate hook through POST /partial_generate."""

import pytest
from hook_app import assert_plugin_failure, deferring, plugin_with, raising, spy, stub_app

pytestmark = pytest.mark.anyio


async def test_a_plugin_answers_and_the_engine_is_not_called():
    spy_plugin, calls = spy()

    def partial_generate(request_id):
        return {
            "request_id": request_id or "cached",
            "output_ids": [7, 8],
            "output_logprobs": [-0.5, -0.25],
            "finish_reason": "stop",
            "cancelled": False,
            "weight_versions": [{"version": "default", "start": 0, "end": 2}],
        }

    async with stub_app({"spy": spy_plugin, "answers": plugin_with("partial_generate", partial_generate)}) as stub:
        result = await stub.ok("partial_generate")
    assert result["output_ids"] == [7, 8] and result["request_id"] == "cached"
    assert calls == []


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_plugin_defers_and_the_engine_generates(is_async):
    seen = []
    async with stub_app({"defers": deferring("partial_generate", is_async, seen)}) as stub:
        result = await stub.ok("partial_generate")
        assert seen == [stub.control]
    assert len(result["output_ids"]) == 4 and result["finish_reason"] == "length"


async def test_a_plugin_decorates_the_engines_generation():
    async def partial_generate(control, input_ids, sampling_params, request_id, http_request):
        params = sampling_params.model_copy(update={"max_new_tokens": min(sampling_params.max_new_tokens, 3)})
        result = await control.partial_generate(input_ids, params, http_request.headers.get("x-sample", request_id))
        return result

    async with stub_app({"decorates": plugin_with("partial_generate", partial_generate)}) as stub:
        body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 500}}
        result = await stub.ok("partial_generate", body, headers={"x-sample": "sample-9"})
    assert len(result["output_ids"]) == 3 and result["request_id"] == "sample-9"


async def test_a_plugin_that_raises_is_a_500_naming_it(caplog):
    async with stub_app({"broken": raising("partial_generate", RuntimeError("boom"))}) as stub:
        await assert_plugin_failure(stub, "partial_generate", caplog)
