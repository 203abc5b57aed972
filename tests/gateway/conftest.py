"""Fixtures of the gateway tier: a real smg (``--enable-rl``) in front of two stub engines (fast),
and in front of a real SGLang and a real vLLM, both with the plugin (``real``)."""

from __future__ import annotations

import contextlib

import pytest

from targets import API_KEY, stub_server

from .smg_server import smg_gateway


@pytest.fixture(scope="module")
def stub_pair(tmp_path_factory):
    """Two stub engines (own processes) with the contract suite's key."""
    tmp = tmp_path_factory.mktemp("gateway-stubs")
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(stub_server(tmp, "--step-s", "0.004")) for _ in range(2)]


@pytest.fixture(scope="module")
def stub_gateway(stub_pair, tmp_path_factory):
    """smg in front of the two stubs."""
    with smg_gateway(tmp_path_factory.mktemp("gateway-smg"), [t.url for t in stub_pair], API_KEY) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def real_pair(tmp_path_factory):
    """A real SGLang and a real vLLM with the plugin, started for this tier (the contract suite's
    session fixture keeps one target alive at a time, and the tier needs both at once)."""
    from targets_sglang import sglang_real_server
    from targets_vllm import real_vllm_server

    with contextlib.ExitStack() as stack:
        sglang = stack.enter_context(sglang_real_server(tmp_path_factory.mktemp("gateway-sglang")))
        vllm = stack.enter_context(real_vllm_server(tmp_path_factory.mktemp("gateway-vllm")))
        yield {"sglang": sglang, "vllm": vllm}


@pytest.fixture(scope="module")
def real_gateway(real_pair, tmp_path_factory):
    """smg in front of the real SGLang and vLLM."""
    urls = [real_pair["sglang"].url, real_pair["vllm"].url]
    with smg_gateway(tmp_path_factory.mktemp("gateway-smg-real"), urls, API_KEY) as gateway:
        yield gateway
