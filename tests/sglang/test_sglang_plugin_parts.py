"""The SGLang plugin's parts that need no server: route replacement, the startup checks, the
hooks in SGLang's registry, seeds, the shims of SGLang before 0.5.20 (and 0.5.19's weight version)."""

import asyncio
import types
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from engine_plugins.contract.errors import ContractError, StartupError
from engine_plugins.contract.schema import SamplingParams
from engine_plugins.engines.sglang import plugin
from engine_plugins.engines.sglang.facade import SGLangEngine, check_names
from engine_plugins.engines.sglang.manifest import MANIFEST
from engine_plugins.engines.sglang.routes import mount
from engine_plugins.engines.sglang.seam import SGLangSeam
from engine_plugins.engines.sglang.tracking import Tracker, register_hooks
from fakes.sglang.names import fake_names
from fakes.sglang.tokenizer_manager import ReqState0517, TokenizerManager


def sglang_like_app() -> FastAPI:
    """An app laid out as SGLang's: /v1/loads from an included router, other routes direct."""
    app = FastAPI()
    loads = APIRouter()

    @loads.get("/v1/loads")
    async def native_loads():
        return {"native": True}

    app.include_router(loads)

    @app.post("/update_weight_version")
    async def native_bump():
        return {"native": True}

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush():
        return {"native": True}

    return app


def contract_router() -> APIRouter:
    router = APIRouter()
    for method, path in (("GET", "/v1/loads"), ("POST", "/update_weight_version"), ("POST", "/pause")):
        router.add_api_route(path, lambda: {"contract": True}, methods=[method])
    return router


@pytest.mark.anyio
async def test_mount_replaces_natives_even_inside_included_routers_and_is_served():
    app = sglang_like_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.get("/v1/loads")).json() == {"native": True}  # routes are cached by version
        report = mount(app, contract_router(), mark_endpoint=fake_names(_serving()).mark_admin_optional)
        assert (await client.get("/v1/loads")).json() == {"contract": True}
        assert (await client.post("/update_weight_version")).json() == {"contract": True}
        assert (await client.post("/pause")).json() == {"contract": True}
        assert (await client.get("/flush_cache")).json() == {"native": True}
    assert [(m, p) for m, p, _ in report.replaced] == [("GET", "/v1/loads"), ("POST", "/update_weight_version")]
    assert len(report.added) == 3
    assert all(getattr(r.endpoint, "_auth_level", None) == "admin_optional" for r in app.router.routes[:3])
    assert mount(app, contract_router()).added == [], "mounting twice changes nothing"


@pytest.mark.anyio
async def test_mount_keeps_natives_when_told_to():
    app = sglang_like_app()
    report = mount(app, contract_router(), replace_native=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.get("/v1/loads")).json() == {"native": True}
        assert (await client.post("/pause")).json() == {"contract": True}
    assert [(m, p) for m, p, _ in report.kept_native] == [("GET", "/v1/loads"), ("POST", "/update_weight_version")]
    assert "ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES=false" in "\n".join(report.lines())


def _serving(**overrides) -> types.SimpleNamespace:
    fields = dict(api_key=None, admin_api_key=None, tokenizer_worker_num=1, enable_deterministic_inference=False)
    return types.SimpleNamespace(**{**fields, **overrides})


def test_a_missing_sglang_name_stops_startup_naming_the_version():
    names = fake_names(_serving())
    names.TokenizerManager = type("TokenizerManager", (), {"generate_request": None})
    names.version = "0.5.21"
    with pytest.raises(StartupError) as info:
        check_names(names)
    assert "SGLang 0.5.21" in str(info.value) and "TokenizerManager._send_one_request(tokenized_obj)" in str(info.value)
    assert "0.5.23" in str(info.value)


def test_a_tokenizer_manager_without_an_attribute_the_plugin_uses_stops_startup():
    names = fake_names(_serving())
    tm = TokenizerManager()
    del tm.is_pause_cond
    with pytest.raises(StartupError) as info:
        SGLangEngine(names, tm)
    assert "TokenizerManager.is_pause_cond" in str(info.value) and "SGLang 0.5.23" in str(info.value)


def test_hooks_go_through_sglangs_registry_and_are_checked_once_applied(monkeypatch):
    registered = []
    names = fake_names(_serving())
    names.HookRegistry = types.SimpleNamespace(register=lambda target, hook, kind: registered.append((target, kind.value)))
    hooks = register_hooks(names)
    assert ("fakes.sglang.tokenizer_manager.TokenizerManager.generate_request", "around") in registered
    assert ("fakes.sglang.tokenizer_manager.TokenizerManager.__init__", "after") in registered
    with pytest.raises(StartupError, match="did not apply the plugin's hooks on TokenizerManager.__init__"):
        hooks.check_applied()  # nothing applied them: the fake registry above only records


def test_multi_tokenizer_mode_is_refused_before_the_server_starts():
    with pytest.raises(StartupError, match="--tokenizer-worker-num 2"):
        plugin._refuse_multi_tokenizer(types.SimpleNamespace(tokenizer_worker_num=2))
    plugin._refuse_multi_tokenizer(types.SimpleNamespace(tokenizer_worker_num=1))


def test_load_does_nothing_in_sglangs_child_processes(monkeypatch):
    monkeypatch.setattr(plugin.multiprocessing, "parent_process", lambda: object())
    monkeypatch.setattr(plugin, "load_names", lambda: pytest.fail("a child process must not import SGLang's app"))
    plugin.load()


def _called_from(module: str):
    """``plugin.in_sglang_child_process()`` as SGLang's ``load_plugins()`` calls it from *module*."""
    code = compile("def load_plugins():\n    return plugin.in_sglang_child_process()\n", module, "exec")
    namespace = {"__name__": module, "plugin": plugin}
    exec(code, namespace)
    return namespace["load_plugins"]()


@pytest.mark.parametrize("module", ["sglang.srt.managers.scheduler", "sglang.srt.managers.detokenizer_manager",
                                    "sglang.srt.managers.data_parallel_controller"])
def test_sglangs_children_are_told_by_the_manager_that_loads_plugins(monkeypatch, module):
    monkeypatch.setattr(plugin.multiprocessing, "parent_process", lambda: object())
    assert _called_from(module) is True


def test_a_spawned_child_that_runs_launch_server_is_the_process_that_serves(monkeypatch):
    # slime's and miles' Ray actor: multiprocessing (spawn) -> launch_server -> Engine -> load_plugins().
    monkeypatch.setattr(plugin.multiprocessing, "parent_process", lambda: object())
    assert _called_from("sglang.srt.entrypoints.engine") is False


def test_a_bad_setting_stops_sglang_with_system_exit(monkeypatch):
    # SGLang logs and ignores an Exception from a plugin; SystemExit stops the server.
    monkeypatch.setenv("ENGINE_PLUGINS_ABORT_TIMEOUT_S", "-1")
    monkeypatch.setattr(plugin, "load_names", lambda: fake_names(_serving()))
    monkeypatch.setattr(plugin, "_installed", False)
    with pytest.raises(SystemExit, match="ENGINE_PLUGINS_ABORT_TIMEOUT_S"):
        plugin.load()


def test_seed_is_sglangs_sampling_seed_and_refused_when_sglang_would_ignore_it():
    serving = _serving(api_key="k", enable_deterministic_inference=True)
    seam = SGLangSeam(Tracker(SGLangEngine(fake_names(serving), TokenizerManager())))
    assert seam.sampling_params(SamplingParams(seed=7))["sampling_seed"] == 7
    assert "seed" not in seam.sampling_params(SamplingParams(seed=7))
    serving.enable_deterministic_inference = False
    with pytest.raises(ContractError) as info:
        seam.sampling_params(SamplingParams(seed=7))
    assert info.value.status == 400 and "--enable-deterministic-inference" in info.value.message
    assert "sampling_seed" not in seam.sampling_params(SamplingParams())


def test_contract_keys_follow_sglangs_admin_optional_rule():
    serving = _serving(api_key="user")
    names = fake_names(serving)
    assert names.api_keys() == ["user"]
    serving.admin_api_key = "admin"
    assert names.api_keys() == ["admin"]
    serving.api_key = serving.admin_api_key = None
    assert names.api_keys() == []


@pytest.mark.parametrize("version", ["0.5.11", "0.5.24", "0.6.0"])
def test_an_sglang_outside_the_supported_range_stops_startup_naming_it_and_the_range(version):
    names = fake_names(_serving())
    names.version = version
    with pytest.raises(StartupError) as info:
        check_names(names)
    assert f"SGLang {version} is not supported" in str(info.value) and f"SGLang {MANIFEST.supported}" in str(info.value)


def _seam_with_dispatched(rids: list[str]) -> tuple[SGLangSeam, list]:
    """A seam over the fake TokenizerManager holding *rids*, all dispatched; the messages it sends."""
    from fakes.sglang.tokenizer_manager import ReqState

    tm = TokenizerManager()
    sent: list = []
    tm._dispatch_to_scheduler = sent.append
    seam = SGLangSeam(Tracker(SGLangEngine(fake_names(_serving()), tm)))
    for rid in rids:
        tm.rid_to_state[rid] = ReqState(out_list=[], finished=False, event=asyncio.Event(), obj=None, dispatched=True)
    return seam, sent


@pytest.mark.anyio
async def test_an_abort_of_every_request_is_one_abort_all_message_and_of_some_one_per_request():
    rids = [f"ep-{i:032x}" for i in range(6)]
    seam, sent = _seam_with_dispatched(rids)
    await seam.abort(seam.registry.select())
    assert [(m.rid, m.abort_all) for m in sent] == [("", True)]
    sent.clear()
    await seam.abort(seam.registry.select(rids[:2]))
    assert sorted((m.rid, m.abort_all) for m in sent) == [(rid, False) for rid in rids[:2]]


@pytest.mark.anyio
async def test_an_abort_by_rid_warns_of_exactly_the_requests_its_prefix_also_reaches(caplog):
    seam, _ = _seam_with_dispatched(["a", "ab", "abc", "ac", "b"])
    with caplog.at_level("WARNING"):
        await seam.abort(seam.registry.select(["a", "abc"]))
    warnings = [r.getMessage() for r in caplog.records if "matches rids by prefix" in r.getMessage()]
    assert warnings == ["engine_plugins: aborting rid 'a' also aborts ['ab', 'ac']: SGLang's scheduler matches rids by prefix"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["in_place", "retract"])
async def test_a_scheduler_pause_right_after_an_abort_still_ends_the_aborted_requests(mode):
    # The aborts reached the scheduler, whose next step would end the running requests; a pause
    # that lands first keeps them (frozen, or retracted with their abort spent) until
    # continue_generation. So the pause is a retract one and the aborts are sent again.
    rids = ["ep-a", "ep-b"]
    seam, sent = _seam_with_dispatched(rids + ["ep-c"])
    aborted = seam.registry.select(rids)
    for entry in aborted:
        entry.aborted = True  # as the control marks them
    await seam.abort(aborted)
    sent.clear()
    obj = seam.sglang.names.PauseGenerationReqInput(mode=mode)
    await seam.tracker.native_pause(lambda: seam.sglang.tm.pause_generation(obj), obj)
    pause, *aborts = sent
    assert pause.mode == "retract" and sorted(m.rid for m in aborts) == rids
    assert seam.tracker.scheduler_pause == "retract"


@pytest.mark.anyio
@pytest.mark.parametrize("release", ["0.5.17", "0.5.18", "0.5.19", "0.5.23"])
async def test_a_request_closed_early_stops_running_in_the_scheduler(release):
    # 0.5.23 aborts a dispatched request when its generator closes; 0.5.19 only drops its state,
    # so the plugin aborts it first. Either way the scheduler stops decoding it.
    tm, tracker, stream = _tracked_request(release, "closed-early", stream=True)
    await stream.__anext__()
    tracker.dispatched("closed-early")  # what the dispatch hook says (no hooks applied here)
    assert [req.rid for req in tm.scheduler.running] == ["closed-early"]
    await stream.aclose()
    await _wait_until_gone(tm, tracker, "closed-early")


def test_the_dispatch_mark_is_sglangs_own_from_0_5_20_and_the_sends_before():
    registered = []
    for release in ("0.5.19", "0.5.23"):
        names = fake_names(_serving(), release)
        names.HookRegistry = types.SimpleNamespace(register=lambda target, hook, kind: registered.append((target.rsplit(".", 2)[-2:], kind.value)))
        register_hooks(names)
    assert (["TokenizerManager0519", "_send_one_request"], "after") in registered
    assert (["TokenizerManager0519", "_send_batch_request"], "after") in registered
    assert (["TokenizerManager0519", "_mark_state_dispatched"], "around") not in registered
    assert (["TokenizerManager", "_mark_state_dispatched"], "around") in registered
    assert not any(target[0] == "TokenizerManager" and target[1].startswith("_send_") for target, _ in registered)


@pytest.mark.anyio
@pytest.mark.parametrize("release", ["0.5.17", "0.5.18", "0.5.19", "0.5.23"])
async def test_a_request_cancelled_before_its_first_output_stops_running_in_the_scheduler(release):
    # A non-streaming request has one output, its last: a client that hangs up cancels it while
    # it waits for its first. 0.5.19 then only drops its state, so the plugin aborts it first.
    tm, tracker, stream = _tracked_request(release, "hung-up", stream=False)
    consumer = asyncio.ensure_future(stream.__anext__())
    for _ in range(100):
        if [req.rid for req in tm.scheduler.running] == ["hung-up"]:
            break
        await asyncio.sleep(0.01)
    tracker.dispatched("hung-up")  # what the dispatch hook says (no hooks applied here)
    assert [req.rid for req in tm.scheduler.running] == ["hung-up"]
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    await _wait_until_gone(tm, tracker, "hung-up")


@pytest.mark.anyio
async def test_a_held_request_sglang_0_5_17s_abort_marked_answers_as_aborted_not_with_its_error():
    # 0.5.17's abort-all marks the held request; past the gate it raises RequestAbortedError (a
    # 400 on SGLang's routes). Here nothing wakes the tracker (no hooks applied), so the request
    # reaches that check itself: the answer is the one of a held request the plugin ends.
    tm, tracker, stream = _tracked_request("0.5.17", "marked", stream=True)
    tm.is_pause = True
    first = asyncio.ensure_future(stream.__anext__())
    await _until_tracked(tracker, "marked")
    tm.abort_request(abort_all=True)
    assert tm.rid_to_state["marked"].abort_requested
    await tm.continue_generation(tm_names("0.5.17").ContinueGenerationReqInput())
    out = await asyncio.wait_for(first, 5)
    assert out["meta_info"]["finish_reason"]["type"] == "abort" and out["output_ids"] == []
    assert tracker.registry.get("marked") is None and tm.rid_to_state == {} and not tm.scheduler.running


def test_an_n_gt_1_requests_logical_state_on_0_5_17_is_dispatched_with_its_first_sample():
    # 0.5.17 keeps the logical state until every sample is sent, and never dispatches it: from
    # the first sample on the request is in the scheduler, not held before it.
    names = tm_names("0.5.17")
    tm = names.TokenizerManager()
    tracker = Tracker(SGLangEngine(names, tm))
    obj = names.GenerateReqInput(rid="logical", input_ids=[1], sampling_params={"n": 2})
    tm.rid_to_state["logical"] = ReqState0517([], False, asyncio.Event(), obj)
    assert tracker.registry.held() == 1
    tm.rid_to_state["logical-0"] = ReqState0517([], False, asyncio.Event(), obj)
    tm.child_rid_to_logical_rid["logical-0"] = "logical"
    tracker.dispatched("logical-0")
    assert tracker.registry.get("logical").dispatched and tracker.registry.held() == 0
    del tm.rid_to_state["logical"]
    assert tracker.registry.get("logical") is None and tracker.registry.get("logical-0") is not None


def tm_names(release: str) -> Any:
    """The fake's names as SGLang *release*."""
    return fake_names(_serving(), release)


def _tracked_request(release: str, rid: str, stream: bool) -> tuple:
    """A fake TokenizerManager of *release* with a tracker, and the tracked generator of one
    2,000-token request *rid* (not started)."""
    names = fake_names(_serving(), release)
    tm = names.TokenizerManager(step_s=0.01)
    tracker = Tracker(SGLangEngine(names, tm))
    obj = names.GenerateReqInput(rid=rid, input_ids=[1, 2, 3], stream=stream,
                                 sampling_params={"max_new_tokens": 2000, "ignore_eos": True})
    return tm, tracker, tracker.track(tm.generate_request(obj), obj)


async def _until_tracked(tracker: Tracker, rid: str) -> None:
    """Wait a few scheduler steps for *rid* to enter the tracker's registry (its generator started)."""
    for _ in range(100):
        if tracker.registry.get(rid) is not None:
            return
        await asyncio.sleep(0.01)


async def _wait_until_gone(tm: Any, tracker: Tracker, rid: str) -> None:
    """Wait a few scheduler steps (the request alone would run 20 s) for *rid* to leave both the
    scheduler and the registry; fail if it does not."""
    for _ in range(100):
        if not tm.scheduler.running and tracker.registry.get(rid) is None:
            break
        await asyncio.sleep(0.01)
    assert tm.scheduler.running == [] and tracker.registry.get(rid) is None
    assert tracker.labels is None or tracker.labels.pending() == 0, "0.5.18's labels keep nothing of it"


def test_before_0_5_19_the_plugin_hooks_the_weight_versions_config_value_and_from_0_5_19_nothing():
    registered = []
    for release in ("0.5.18", "0.5.19"):
        names = fake_names(_serving(), release)
        names.HookRegistry = types.SimpleNamespace(register=lambda target, hook, kind: registered.append((target.rsplit(".", 2)[-2:], kind.value)))
        register_hooks(names)
    assert (["TokenizerManager0518", "record_config_updates"], "around") in registered
    assert not any(target == ["TokenizerManager0519", "record_config_updates"] for target, _ in registered)


def test_on_0_5_16_the_plugin_hooks_and_sets_the_weight_version_where_a_weight_update_records_it():
    # 0.5.16 has no config values: the version is the server args', set by override.
    names = tm_names("0.5.16")
    registered = []
    names.HookRegistry = types.SimpleNamespace(register=lambda target, hook, kind: registered.append((target.rsplit(".", 2)[-2:], kind.value)))
    register_hooks(names)
    assert (["TokenizerManager0516", "_update_weight_version_if_provided"], "around") in registered
    assert not any(target[1] == "record_config_updates" for target, _ in registered)
    tm = names.TokenizerManager()
    engine = SGLangEngine(names, tm)
    asyncio.run(engine.set_weight_version("v7"))
    assert (engine.weight_version(), tm.server_args.weight_version) == ("v7", "v7")


@pytest.mark.parametrize("release, streamed", [("0.5.18", True), ("0.5.19", False)])
def test_before_0_5_19_the_scheduler_sends_a_non_streaming_requests_tokens_as_it_makes_them(release, streamed):
    # Each token is labelled as it reaches the TokenizerManager: not 50 at a time.
    tokenized = types.SimpleNamespace(rid="r", stream=False)
    fake_names(_serving(), release).send_every_token(tokenized)
    assert tokenized.stream is streamed


@pytest.mark.parametrize("exact", [True, False])
def test_exact_token_versions_false_leaves_a_non_streaming_request_to_sglangs_own_cadence(exact):
    # ENGINE_PLUGINS_EXACT_TOKEN_VERSIONS=false: the per-token sends (and their cost) are off.
    names = tm_names("0.5.18")
    hooks = {}
    names.HookRegistry = types.SimpleNamespace(register=lambda target, hook, kind: hooks.setdefault(target.rsplit(".", 1)[-1], hook))
    register_hooks(names, exact_token_versions=exact)
    tokenized = types.SimpleNamespace(rid="r", stream=False)
    assert hooks["_create_tokenized_object"](lambda tm, *args: tokenized, names.TokenizerManager()) is tokenized
    assert tokenized.stream is exact


def _bump_0518(names: Any, tracker: Tracker, version: str, source: str = "http.update_weight_version") -> None:
    """A change of 0.5.18's weight version through its config value, with the plugin's hook (no
    hook registry here: the hook is called as SGLang's registry would)."""
    hook, kind = names.weight_version_hooks(lambda tm, v: tracker.version_changing(v))["record_config_updates"]
    assert kind == "AROUND"
    tm = tracker.sglang.tm
    hook(type(tm).record_config_updates, tm, source, weight_version=version)


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [True, False])
async def test_on_0_5_18_a_requests_tokens_carry_the_version_in_force_when_they_arrived(stream):
    # SGLang 0.5.18 labels no tokens: the plugin records each change of the TokenizerManager's
    # version, and the final output gets the spans SGLang 0.5.19 would send.
    names = fake_names(_serving(), "0.5.18")
    tm = names.TokenizerManager(step_s=0.002)
    tracker = Tracker(SGLangEngine(names, tm))
    obj = names.GenerateReqInput(rid="labelled", input_ids=[1, 2, 3], stream=stream, return_logprob=True,
                                 sampling_params={"max_new_tokens": 120, "ignore_eos": True})
    outputs = tracker.track(tm.generate_request(obj), obj)
    consumer = asyncio.ensure_future(_drain(outputs))
    for _ in range(500):
        state = tm.rid_to_state.get("labelled")
        if state is not None and len(state.output_ids) >= 50:
            break
        await asyncio.sleep(0.002)
    at_bump = len(tm.rid_to_state["labelled"].output_ids)
    _bump_0518(names, tracker, "v2")
    last = (await consumer)[-1]["meta_info"]
    assert tm.config_value("weight_version") == "v2"
    assert last["weight_versions"] == [{"version": "default", "start": 0, "end": at_bump},
                                       {"version": "v2", "start": at_bump, "end": 120}]
    assert last["weight_version"] == "v2" and tracker.labels.pending() == 0


@pytest.mark.anyio
async def test_on_0_5_18_a_change_after_the_last_output_arrived_does_not_relabel_it():
    names = fake_names(_serving(), "0.5.18")
    tm = names.TokenizerManager(step_s=0.002)
    tracker = Tracker(SGLangEngine(names, tm))
    obj = names.GenerateReqInput(rid="done", input_ids=[1, 2, 3], stream=False, return_logprob=True,
                                 sampling_params={"max_new_tokens": 20, "ignore_eos": True})
    outputs = tracker.track(tm.generate_request(obj), obj)
    # The bump comes right as SGLang deletes the state: the last output is in, not yet handed on.
    tracker.state_deleted = lambda rid, _deleted=tracker.state_deleted: (_deleted(rid), _bump_0518(names, tracker, "v2"))
    meta = (await asyncio.wait_for(outputs.__anext__(), 5))["meta_info"]
    await outputs.aclose()
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": 20}] and meta["weight_version"] == "default"
    assert tracker.labels.pending() == 0


async def _drain(outputs: Any) -> list:
    return [out async for out in outputs]


def test_on_0_5_15_incremental_streaming_is_read_from_the_server_args():
    # 0.5.15 keeps --incremental-streaming-output in its server args only (0.5.16 copies it).
    names = tm_names("0.5.15")
    tm = names.TokenizerManager()
    assert not hasattr(tm, "incremental_streaming_output")
    engine = SGLangEngine(names, tm)
    assert engine.incremental_streaming() is False
    tm.server_args.incremental_streaming_output = True
    assert engine.incremental_streaming() is True


@pytest.mark.anyio
@pytest.mark.parametrize("release", ["0.5.12", "0.5.16", "0.5.23"])
async def test_a_held_request_the_plugin_ends_leaves_no_request_state(release):
    # Ending it cancels SGLang's generator at the pause gate: 0.5.12 has no failure path there,
    # 0.5.16's catches an Exception only; either would keep the state, and the request in flight.
    tm, tracker, stream = _tracked_request(release, "held", stream=True)
    tm.is_pause = True
    first = asyncio.ensure_future(stream.__anext__())
    await _until_tracked(tracker, "held")
    tracker.registry.get("held").aborted = True  # as the seam's abort marks a held request
    tracker.wake_held()
    out = await asyncio.wait_for(first, 5)
    assert out["meta_info"]["finish_reason"]["type"] == "abort" and out["output_ids"] == []
    assert tm.rid_to_state == {} and tracker.registry.get("held") is None


@pytest.mark.anyio
@pytest.mark.parametrize("release", ["0.5.12", "0.5.23"])
async def test_a_request_sglang_refuses_before_dispatch_leaves_no_request_state(release):
    # Past the context length: SGLang raises while tokenizing; 0.5.12 never drops the state.
    names = tm_names(release)
    tm = names.TokenizerManager()
    tracker = Tracker(SGLangEngine(names, tm))
    obj = names.GenerateReqInput(rid="too-long", input_ids=[1] * 100, stream=True,
                                 sampling_params={"max_new_tokens": tm.context_len})
    stream = tracker.track(tm.generate_request(obj), obj)
    with pytest.raises(ValueError, match="maximum context length"):
        await stream.__anext__()
    assert tm.rid_to_state == {} and tracker.registry.get("too-long") is None


@pytest.mark.anyio
async def test_on_0_5_12_the_rank_loads_are_its_dataclasses_as_its_own_v1_loads_writes_them():
    # 0.5.12's get_loads returns GetLoadsReqOutput dataclasses (no LoadSnapshot): its /v1/loads
    # writes each without its timestamp and its absent (None) sections.
    names = tm_names("0.5.12")
    assert names.LoadSnapshot is None and "LoadSnapshot" not in str(names.engine_objects())
    engine = SGLangEngine(names, names.TokenizerManager())
    newest = SGLangEngine(tm_names("0.5.23"), TokenizerManager())
    (load,), (snapshot,) = await engine.rank_loads(), await newest.rank_loads()
    assert "timestamp" not in load and not {"memory", "speculative", "lora", "disaggregation"} & set(load)
    assert load["queues"] == {"waiting": 0, "grammar": 0, "paused": 0, "retracted": 0}
    assert {k: load[k] for k in ("dp_rank", "num_running_reqs", "num_waiting_reqs")} == {"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}
    assert {k: snapshot[k] for k in ("dp_rank", "num_running_reqs", "num_waiting_reqs")} == {"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}
