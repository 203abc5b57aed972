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
def real_pair(running_targets):
    """The contract suite's real SGLang and real vLLM with the plugin, both running at once (the
    tests that use them are marked ``uses_targets("sglang", "vllm")``)."""
    return {"sglang": running_targets.get("sglang"), "vllm": running_targets.get("vllm")}


@pytest.fixture(scope="module")
def real_gateway(real_pair, tmp_path_factory):
    """smg in front of the real SGLang and vLLM."""
    urls = [real_pair["sglang"].url, real_pair["vllm"].url]
    with smg_gateway(tmp_path_factory.mktemp("gateway-smg-real"), urls, API_KEY) as gateway:
        yield gateway
