"""The SGLang plugin's parts that need no server: route replacement, the startup checks, seeds."""

import types

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from engine_plugins.errors import ContractError, StartupError
from engine_plugins.schema import SamplingParams
from engine_plugins.sglang import plugin
from engine_plugins.sglang.adapter import SGLangSeam
from engine_plugins.sglang.engine_api import check_api
from engine_plugins.sglang.routes import mount
from fakes.sglang.api import fake_api


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
        report = mount(app, contract_router(), auth_level="admin_optional")
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


def test_a_missing_sglang_name_stops_startup_naming_the_version():
    api = fake_api(types.SimpleNamespace(api_key=None, admin_api_key=None, tokenizer_worker_num=1, enable_deterministic_inference=False))
    api.TokenizerManager = type("TokenizerManager", (), {"generate_request": None})
    api.version = "0.9.99"
    with pytest.raises(StartupError) as info:
        check_api(api)
    assert "SGLang 0.9.99" in str(info.value) and "TokenizerManager._mark_state_dispatched" in str(info.value)
    assert "0.5.23" in str(info.value)


def test_multi_tokenizer_mode_is_refused_before_the_server_starts():
    started = []
    module = types.SimpleNamespace(launch_server=lambda args: started.append(args))
    api = types.SimpleNamespace(http_server=module)
    plugin._refuse_multi_tokenizer(api)
    with pytest.raises(StartupError, match="--tokenizer-worker-num 2"):
        module.launch_server(types.SimpleNamespace(tokenizer_worker_num=2))
    module.launch_server(types.SimpleNamespace(tokenizer_worker_num=1))
    assert len(started) == 1
    plugin._refuse_multi_tokenizer(api)  # a second load does not wrap twice
    assert module.launch_server.__wrapped__ is not None and not hasattr(module.launch_server.__wrapped__, "__wrapped__")


def test_load_does_nothing_in_sglangs_child_processes(monkeypatch):
    monkeypatch.setattr(plugin.multiprocessing, "parent_process", lambda: object())
    monkeypatch.setattr(plugin, "load_sglang_api", lambda: pytest.fail("a child process must not import SGLang's app"))
    plugin.load()


def test_a_bad_setting_stops_sglang_with_system_exit(monkeypatch):
    # SGLang logs and ignores an Exception from a plugin; SystemExit stops the server.
    monkeypatch.setenv("ENGINE_PLUGINS_ABORT_TIMEOUT_S", "-1")
    serving = types.SimpleNamespace(api_key=None, admin_api_key=None, tokenizer_worker_num=1, enable_deterministic_inference=False)
    monkeypatch.setattr(plugin, "load_sglang_api", lambda: fake_api(serving))
    monkeypatch.setattr(plugin, "_installed", None)
    with pytest.raises(SystemExit, match="ENGINE_PLUGINS_ABORT_TIMEOUT_S"):
        plugin.load()


def test_seed_is_sglangs_sampling_seed_and_refused_when_sglang_would_ignore_it():
    serving = types.SimpleNamespace(api_key="k", admin_api_key=None, tokenizer_worker_num=1, enable_deterministic_inference=True)
    tracker = types.SimpleNamespace(tm=None, registry=None)
    seam = SGLangSeam(fake_api(serving), tracker)
    assert seam.sampling_params(SamplingParams(seed=7))["sampling_seed"] == 7
    assert "seed" not in seam.sampling_params(SamplingParams(seed=7))
    serving.enable_deterministic_inference = False
    with pytest.raises(ContractError) as info:
        seam.sampling_params(SamplingParams(seed=7))
    assert info.value.status == 400 and "--enable-deterministic-inference" in info.value.message
    assert "sampling_seed" not in seam.sampling_params(SamplingParams())


def test_contract_keys_follow_sglangs_admin_optional_rule():
    serving = types.SimpleNamespace(api_key="user", admin_api_key=None, tokenizer_worker_num=1, enable_deterministic_inference=False)
    api = fake_api(serving)
    assert api.api_keys() == ["user"]
    serving.admin_api_key = "admin"
    assert api.api_keys() == ["admin"]
    serving.api_key = serving.admin_api_key = None
    assert api.api_keys() == []
