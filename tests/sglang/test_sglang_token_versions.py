"""``ENGINE_PLUGINS_EXACT_TOKEN_VERSIONS=false`` on an SGLang before 0.5.19 (where the plugin labels
each token's weight version as its output reaches the API process): the scheduler keeps its own
cadence, one output per 50 tokens for a non-streaming request, so such a request's spans change
version only at a multiple of 50; the answer is otherwise whole."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from contract.api import Api, native_body
from fakes.sglang.scheduler import FORCE_STREAM_INTERVAL
from targets_sglang import sglang_fake_server, sglang_real_server

pytestmark = pytest.mark.anyio

TOKENS = 400
OFF = {"ENGINE_PLUGINS_EXACT_TOKEN_VERSIONS": "false"}


async def stream_until(api: Api, rid: str, tokens: int, reached: asyncio.Event) -> None:
    """A streaming /generate; sets *reached* once it has *tokens* tokens, and reads it to its end."""
    async with api.http.stream("POST", "/generate", json=native_body(TOKENS, rid, stream=True)) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                if json.loads(line[5:])["meta_info"]["completion_tokens"] >= tokens:
                    reached.set()


async def changes_at_sglangs_cadence(target) -> None:
    """Bump the version while a non-streaming request has made 130 tokens; its spans change version
    at a multiple of 50 (the outputs that had reached the API process), and it is whole."""
    new = f"v-{uuid.uuid4().hex[:8]}"
    async with Api(target) as api:
        old = (await api.loads())["weight_version"]
        await api.warm(2)
        reached = asyncio.Event()
        # Both in one batch: when the streaming one has 130 tokens, the other has made as
        # many, and two of its outputs (100 tokens) have reached the API process.
        streaming = asyncio.create_task(stream_until(api, f"s-{uuid.uuid4().hex}", 130, reached))
        plain = asyncio.create_task(api.post("/generate", native_body(TOKENS, f"n-{uuid.uuid4().hex}")))
        await asyncio.wait_for(reached.wait(), timeout=120)
        await api.ok("POST", "/update_weight_version", {"new_version": new})
        response = await plain
        await streaming
    assert response.status_code == 200, response.text
    out = response.json()
    assert len(out["output_ids"]) == TOKENS and out["meta_info"]["finish_reason"]["type"] == "length"
    spans = out["meta_info"]["weight_versions"]
    assert [s["version"] for s in spans] == [old, new], spans
    assert spans[0]["end"] >= 2 * FORCE_STREAM_INTERVAL and spans[0]["end"] % FORCE_STREAM_INTERVAL == 0, spans
    assert spans[-1]["end"] == TOKENS


async def test_with_exact_token_versions_off_a_non_streaming_request_changes_version_at_sglangs_own_cadence(tmp_path):
    # The fake as SGLang 0.5.18 (with exact labels on, the same bump lands on the 130th token or so).
    with sglang_fake_server(tmp_path, "--step-s", "0.002", "--tokenize-s", "0.005", "--like-0.5.18", env=OFF,
                            name="sglang-0.5.18-stub") as target:
        await changes_at_sglangs_cadence(target)


@pytest.mark.real
async def test_with_exact_token_versions_off_a_real_sglang_0_5_15_keeps_its_own_cadence(tmp_path):
    with sglang_real_server(tmp_path, env=OFF, version="0.5.15") as target:
        await changes_at_sglangs_cadence(target)
