"""Fixtures for the client tests: stub fleets, the engines' fakes without the plugin (their native
routes), and servers that fail, hang or hang up."""

from __future__ import annotations

import contextlib

import pytest

from .servers import failing_app, native_server, raw_socket_server, serve_app, stub_process

KEY = "client-test-key"


@pytest.fixture(scope="session")
def stub_fleet(tmp_path_factory):
    """Three stub engines (own processes, uvicorn on loopback) sharing one API key."""
    tmp = tmp_path_factory.mktemp("fleet")
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(stub_process(tmp, "--step-s", "0.004", api_key=KEY)) for _ in range(3)]


@pytest.fixture
def slow_release_stub(tmp_path):
    """A stub whose aborted requests take 30 s to release: waiting for idle must time out."""
    with stub_process(tmp_path, "--step-s", "0.004", "--release-delay-s", "30", api_key=KEY) as stub:
        yield stub


@pytest.fixture
def failing_url():
    """A server answering 500 to everything."""
    with serve_app(failing_app()) as url:
        yield url


@pytest.fixture
def hanging_url():
    """A server that accepts connections and never answers."""
    with raw_socket_server("silent") as url:
        yield url


@pytest.fixture
def hang_up_url():
    """A server that reads each request and closes the connection without answering."""
    with raw_socket_server("hang_up") as url:
        yield url


@pytest.fixture
def unreachable_url():
    """A loopback port nobody listens on."""
    from targets import free_port

    return f"http://127.0.0.1:{free_port()}"


# Slow enough steps that a generation outlives the test's arranging on a busy machine.
NATIVE_STEP_S = "0.01"


@pytest.fixture
def fake_sglang(tmp_path):
    """SGLang 0.5.23's own routes (no plugin)."""
    with native_server(tmp_path, "sglang", "--step-s", NATIVE_STEP_S) as server:
        yield server


@pytest.fixture
def fake_sglang_legacy(tmp_path):
    """An older SGLang with /get_load instead of /v1/loads."""
    with native_server(tmp_path, "sglang", "--step-s", NATIVE_STEP_S, "--legacy-loads") as server:
        yield server


@pytest.fixture
def fake_vllm(tmp_path):
    """vLLM 0.32 with VLLM_SERVER_DEV_MODE=1 and no plugin."""
    with native_server(tmp_path, "vllm", "--step-s", NATIVE_STEP_S, "--dev-mode") as server:
        yield server


@pytest.fixture
def fake_vllm_no_dev(tmp_path):
    """vLLM 0.32 without dev mode and without the plugin: no control routes."""
    with native_server(tmp_path, "vllm", "--step-s", NATIVE_STEP_S) as server:
        yield server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_collection_modifyitems(config, items):
    """The real dev-mode vLLM test belongs to the ``vllm`` target: a run narrowed with ``--target``
    to other targets (e.g. ``--target stub``) leaves it out, as it leaves out the vLLM target."""
    chosen = config.getoption("target")
    if not chosen or "vllm" in chosen:
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("native_vllm") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config):
    config.addinivalue_line("markers", "native_vllm: drives a real vLLM without the plugin (belongs to the vllm target; so: real, tests/tiers.py)")
