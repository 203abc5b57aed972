"""The contract attached to an in-process ``AsyncLLM`` (engines/vllm/inprocess.py), on the fake:
one attachment and one control per engine client, whoever attaches first (attach, vLLM's
construction, the endpoint plugin); vLLM's own pause, resume, abort and version set from outside
the plugin go through the contract's hooks with vLLM's signatures and return values."""

from __future__ import annotations

import asyncio
import inspect
import sys
import types
from argparse import Namespace

import pytest
from fastapi import FastAPI

from engine_plugins import hookimpl
from engine_plugins.engines.vllm import construction, engine_core, inprocess
from engine_plugins.engines.vllm.plugin import VllmEndpointPlugin
from engine_plugins.host.config import ConfigError, Settings, load_settings
from fakes.vllm import engine as fake
from fakes.vllm.server import fake_names

pytestmark = pytest.mark.anyio


class Seen:
    """A third-party plugin that records the hook calls it sees and defers each to the engine."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    @hookimpl
    def pause(self, mode, clear_cache):
        self.calls.append(("pause", mode, clear_cache))

    @hookimpl
    def resume(self):
        self.calls.append(("resume",))

    @hookimpl
    def abort(self, request_ids, wait, reason):
        self.calls.append(("abort", request_ids, wait, reason))

    @hookimpl
    def update_weight_version(self, new_version):
        self.calls.append(("update_weight_version", new_version))


@pytest.fixture
async def llm():
    """A started fake AsyncLLM, its engine core with the general plugin's utilities."""
    for install in (engine_core.install_request_counts, engine_core.install_pause_hold, engine_core.install_weight_version):
        install(fake.EngineCore)
    engine = fake.AsyncLLM(step_s=0.002)
    engine.start()
    try:
        yield engine
    finally:
        await engine.shutdown()


def attached(llm, seen: Seen | None = None) -> inprocess.Attachment:
    attachment = inprocess.attachment_for(llm, fake_names(), Settings())
    if seen is not None:
        attachment.stack().pm.register(seen, name="seen")
    return attachment


async def generate(llm, request_id: str, max_tokens: int) -> list:
    params = fake.SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return [out async for out in llm.generate({"prompt_token_ids": [1, 5, 9]}, params, request_id)]


async def until(predicate, deadline_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not predicate():
        assert loop.time() < end, "condition never held"
        await asyncio.sleep(0.001)


async def test_one_attachment_and_one_stack_per_engine_client(llm):
    first = attached(llm)
    generate_method = llm.generate
    again = attached(llm)
    assert again is first and again.stack() is first.stack(), "the same stack every time"
    assert llm.generate is generate_method, "the entry points are wrapped once"
    assert first.stack().hooks.control() is first.control()


async def test_vllms_pause_and_resume_from_outside_are_the_contracts_with_vllms_signatures(llm):
    seen = Seen()
    attachment = attached(llm, seen)
    assert "mode" in inspect.signature(llm.pause_generation).parameters, "vLLM's signature"
    task = asyncio.create_task(generate(llm, "held", 300))
    await until(lambda: attachment.knows("held"))
    assert await llm.pause_generation(mode="keep", clear_cache=False) is None
    assert attachment.control().pause_mode == "keep" and await llm.is_paused() is True
    with pytest.raises(TypeError):
        await llm.pause_generation("keep")  # keyword-only, as vLLM's
    assert await llm.resume_generation() is None
    outputs = await task
    assert outputs[-1].outputs[0].finish_reason == "length" and len(outputs[-1].outputs[0].token_ids) == 300
    assert attachment.control().pause_mode is None and await llm.is_paused() is False
    assert seen.calls == [("pause", "keep", False), ("resume",)]


async def test_vllms_abort_from_outside_is_the_contracts_exact_abort_and_untracked_ids_reach_vllm(llm):
    seen = Seen()
    attachment = attached(llm, seen)
    one = asyncio.create_task(generate(llm, "job-1", 2000))
    ten = asyncio.create_task(generate(llm, "job-10", 2000))
    await until(lambda: attachment.knows("job-1") and attachment.knows("job-10"))
    assert await llm.abort(["job-1", "not-tracked"]) is None
    assert (await one)[-1].outputs[0].finish_reason == "abort"
    assert not ten.done(), "exact ids: job-10 runs on"
    assert seen.calls == [("abort", ["job-1"], False, "request")]
    await llm.abort("job-10")
    assert (await ten)[-1].outputs[0].finish_reason == "abort"


async def test_a_version_set_through_vllms_method_is_the_contracts_bump(llm):
    seen = Seen()
    attachment = attached(llm, seen)
    await llm.update_weight_version("v2")
    control = attachment.control()
    assert control.weight_version() == "v2" and control.versions.current == 1
    assert seen.calls == [("update_weight_version", "v2")]


async def test_the_endpoint_plugin_serves_an_attached_engine_client_with_its_control(llm):
    attachment = attached(llm)
    stack = attachment.stack()
    generate_method = llm.generate
    plugin = VllmEndpointPlugin(load_names=fake_names, settings=Settings())
    plugin.attach_router(FastAPI())
    await plugin.init_state(llm, Namespace(), Namespace(api_key=None, host="127.0.0.1", api_server_count=None))
    assert plugin._control is attachment.control() and plugin._control.seam.tracker is attachment.tracker
    assert llm.generate is generate_method, "not wrapped twice"
    assert inprocess.attachment_for(llm).stack() is stack, "attach still returns its stack, over the same control"


async def test_attach_after_the_endpoint_plugin_reaches_its_control(llm):
    plugin = VllmEndpointPlugin(load_names=fake_names, settings=Settings())
    plugin.attach_router(FastAPI())
    await plugin.init_state(llm, Namespace(), Namespace(api_key=None, host="127.0.0.1", api_server_count=None))
    attachment = inprocess.attachment_of(llm)
    assert attachment is not None
    assert attachment.stack() is plugin._stack and attachment.stack().hooks.control() is plugin._control


def test_attach_needs_no_event_loop():
    # A Ray actor's __init__: no loop runs; the tracker is installed, the engine core is read later.
    llm = fake.AsyncLLM()
    attachment = inprocess.attachment_for(llm, fake_names(), Settings())
    assert attachment.stack() is inprocess.attachment_for(llm).stack()
    assert attachment.control().weight_version() == "default"


def test_vllms_construction_is_hooked_once_whether_its_module_is_imported_before_or_after(monkeypatch, tmp_path):
    built = []
    module = types.ModuleType("fake_async_llm_before")
    module.AsyncLLM = type("AsyncLLM", (), {"__init__": lambda self, x=1: setattr(self, "x", x)})
    monkeypatch.setattr(construction, "ASYNC_LLM_MODULE", module.__name__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    construction.hook_construction(built.append)
    construction.hook_construction(built.append)  # idempotent
    engine = module.AsyncLLM(x=2)
    assert built == [engine] and engine.x == 2

    # Not imported yet: hooked when it is.
    (tmp_path / "fake_async_llm_after.py").write_text("class AsyncLLM:\n    def __init__(self):\n        self.ok = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(construction, "ASYNC_LLM_MODULE", "fake_async_llm_after")
    construction.hook_construction(built.append)
    import fake_async_llm_after

    later = fake_async_llm_after.AsyncLLM()
    assert built == [engine, later] and later.ok and fake_async_llm_after.__loader__ is not None
    assert not any(isinstance(f, construction._HookOnImport) for f in sys.meta_path)
    sys.modules.pop("fake_async_llm_after", None)


def test_the_automatic_attach_can_be_turned_off_and_a_bad_value_names_the_variable():
    assert load_settings({"ENGINE_PLUGINS_ATTACH_IN_PROCESS": "0"}).attach_in_process is False
    assert load_settings({}).attach_in_process is True
    with pytest.raises(ConfigError, match="ENGINE_PLUGINS_ATTACH_IN_PROCESS"):
        load_settings({"ENGINE_PLUGINS_ATTACH_IN_PROCESS": "maybe"})
