"""The manual's plugin examples (docs/plugins.md), taken from its text and run as plugins on the stub engine."""

import asyncio
import re
import types

import pytest
from hook_app import spy, stub_app

pytestmark = pytest.mark.anyio

EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```python\n(.*?)```", re.DOTALL)


@pytest.fixture(scope="module")
def examples(readme) -> dict[str, types.ModuleType]:
    """Each example block of the manual as a module, by the name in its marker."""
    modules = {}
    for name, source in EXAMPLE.findall(readme):
        module = types.ModuleType(name)
        exec(compile(source, f"README.md:{name}", "exec"), module.__dict__)
        modules[name] = module
    return modules


def test_the_readme_has_the_three_examples(examples):
    assert set(examples) == {"known_version", "abort_audit", "token_cap"}


async def test_known_version_answers_a_bump_to_the_current_version_and_defers_the_others(examples):
    spy_plugin, calls = spy()
    async with stub_app({"spy": spy_plugin, "known_version": examples["known_version"]}) as stub:
        same = await stub.ok("update_weight_version", {"new_version": "default"})
        assert same == {"success": True, "new_version": "default", "previous_version": "default", "aborted": 0, "message": "Weight version updated to default"}
        assert calls == [], "answered by the example"
        bumped = await stub.ok("update_weight_version", {"new_version": "v2"})
        assert bumped["previous_version"] == "default" and calls == ["update_weight_version"]
        assert (await stub.ok("loads"))["weight_version"] == "v2"


async def test_abort_audit_logs_every_abort_and_the_engine_aborts(examples, caplog):
    async with stub_app({"abort_audit": examples["abort_audit"]}) as stub:
        with caplog.at_level("INFO", logger="abort_audit"):
            task = stub.generate(100_000)
            await stub.wait_in_flight(1)
            await stub.ok("pause", {"mode": "abort"})
            assert (await task).json()["cancelled"] is True
            await stub.ok("resume")
            result = await stub.ok("abort", {"request_ids": ["a"]})
    assert result["aborted"] == 0
    assert [r.getMessage() for r in caplog.records if r.name == "abort_audit"] == [
        "abort of every request (pause) from 127.0.0.1",
        "abort of ['a'] (request) from 127.0.0.1",
    ]


async def test_token_cap_caps_every_generation(examples):
    async with stub_app({"token_cap": examples["token_cap"]}) as stub:
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 100_000}}
        long, short = await asyncio.gather(
            stub.ok("partial_generate", body), stub.ok("partial_generate", {**body, "sampling_params": {"max_new_tokens": 5}})
        )
    assert len(long["output_ids"]) == 256 and long["finish_reason"] == "length"
    assert len(short["output_ids"]) == 5
