"""The servers of figure 9 (:mod:`benchmarks.step_boundary`) and the engines' own routes it calls
on them: a server per engine and mode (without the plugin, with it), the greedy probe of
``tests/swap/helpers.py``, the versions the engine reports, and the rollouts' generation routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from pathlib import Path
from typing import Optional

import httpx

from tools.launcher.engine_server import EngineServer

from .common import REPO

sys.path.insert(0, str(REPO / "tests"))
from swap.helpers import PROBE_IDS, PROBE_TOKENS  # noqa: E402
from targets import TESTS  # noqa: E402
from targets_vllm import FILE_TRANSFER_EXTENSION  # noqa: E402

KEY = "step-boundary-key"


# --- servers ---------------------------------------------------------------------------------


def engine_server(engine: str, plugin: bool, checkpoint: Path) -> EngineServer:
    """The real-weights test target's server (tests/targets_sglang.py, targets_vllm.py), with the
    plugin or with none."""
    if engine == "sglang":
        env = {} if plugin else {"SGLANG_PLUGINS": "no_such_plugin"}  # an allowlist naming no plugin
        args = ["--enable-metrics", "--load-format", "auto"]
    else:
        env = {"VLLM_PLUGINS": "engine_plugins" if plugin else "no_such_plugin", "VLLM_SERVER_DEV_MODE": "1",
               "PYTHONPATH": str(TESTS)}
        args = ["--worker-extension-cls", FILE_TRANSFER_EXTENSION, "--weight-transfer-config", '{"backend": "file"}',
                "--load-format", "auto"]
    return EngineServer(engine, REPO, api_key=KEY, env=env, extra_args=args, model_dir=checkpoint)


class Server:
    """One running server of the figure, its checkpoints' references and the weights it holds."""

    def __init__(self, engine: str, plugin: bool, checkpoints: tuple[Path, Path]) -> None:
        self.engine, self.plugin, self.checkpoints = engine, plugin, checkpoints
        self.process = engine_server(engine, plugin, checkpoints[0])
        self.http: Optional[httpx.AsyncClient] = None
        self.references: dict[Path, list[int]] = {}
        self.loaded = checkpoints[0]
        self.model = ""
        self.transfer_ready = False
        self.starts: list[float] = []
        self.starter: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None

    def start(self) -> threading.Event:
        """Start the engine from a thread, so that both servers start at once (the server
        outlives the thread: the spawner stops it when this process ends, not the thread); the
        event is set once it answers, or failed to start."""
        ready, self.error = threading.Event(), None
        process = self.process

        def start() -> None:
            try:
                process.start()
                self.starts.append(round(process.startup_seconds, 1))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self.error = exc
            finally:
                ready.set()

        self.starter = threading.Thread(target=start, name=f"{self.engine}-{'plugin' if self.plugin else 'bare'}", daemon=True)
        self.starter.start()
        return ready

    def stop(self) -> None:
        """Stop the server (once its start has ended)."""
        if self.starter is not None:
            self.starter.join()
            self.starter = None
        self.process.stop()

    async def setup(self) -> None:
        """A client, vLLM's model name, the references; the weight-transfer engine initialized."""
        self.http = httpx.AsyncClient(base_url=self.process.url, headers={"Authorization": f"Bearer {KEY}"},
                                      timeout=httpx.Timeout(300.0, connect=30.0),
                                      limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))
        if self.engine == "vllm":
            self.model = (await self.http.get("/v1/models")).json()["data"][0]["id"]
        for checkpoint in reversed(self.checkpoints):  # B, then A: A stays loaded, as started
            await self.idle_load(checkpoint)
            self.references[checkpoint] = await probe(self)
        assert self.references[self.checkpoints[0]] != self.references[self.checkpoints[1]], "A and B probe alike"
        if self.engine == "vllm":
            # A trainer initializes the weight-transfer engine once, at its start (test_vllm_transfer.py).
            answer = await self.http.post("/init_weight_transfer_engine", json={"init_info": {}})
            self.transfer_ready = answer.status_code == 200

    async def idle_load(self, checkpoint: Path) -> None:
        """Load *checkpoint* while idle with the engine's own route, and leave no KV of the old weights."""
        if self.engine == "sglang":
            answer = await self.http.post("/update_weights_from_disk", json={"model_path": str(checkpoint)})
        else:
            answer = await self.http.post("/collective_rpc", json={"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint)}})
            # Without the plugin vLLM keeps its prefix cache across a reload; idle, its reset runs.
            await self.http.post("/reset_prefix_cache")
        answer.raise_for_status()
        self.loaded = checkpoint

    async def empty_cache(self) -> None:
        """Empty the prefix cache while idle (both engines run it then)."""
        with contextlib.suppress(httpx.HTTPError):
            if self.engine == "sglang":
                await self.http.get("/flush_cache")
            else:
                await self.http.post("/reset_prefix_cache")

    def healthy(self) -> bool:
        """The server's process runs (a dead scheduler or engine core takes it down) and answers.
        Not SGLang's /health: it answers 503 to a server that has just come back from a pause."""
        if self.process.process is None or self.process.process.poll() is not None:
            return False
        try:
            path = "/model_info" if self.engine == "sglang" else "/v1/models"
            return httpx.get(self.process.url + path, headers=self.process.headers(), timeout=30).status_code == 200
        except httpx.HTTPError:
            return False

    async def restart(self) -> None:
        """A new server of the same kind, after a crash."""
        if self.http is not None:
            await self.http.aclose()
        await asyncio.to_thread(self.stop)
        self.process = engine_server(self.engine, self.plugin, self.checkpoints[0])
        await asyncio.to_thread(self.start().wait)
        if self.error is not None:
            raise self.error
        self.loaded = self.checkpoints[0]
        await self.setup()


# --- the engines' own routes -------------------------------------------------------------------


async def probe(server: Server, salt: Optional[str] = None) -> Optional[list[int]]:
    """The greedy probe's output ids through the engine's own route (the same on both servers);
    None if it failed."""
    try:
        if server.engine == "sglang":
            answer = await server.http.post("/generate", json={
                "input_ids": PROBE_IDS, "return_logprob": True,
                "sampling_params": {"max_new_tokens": PROBE_TOKENS, "temperature": 0.0, "ignore_eos": True}})
            answer.raise_for_status()
            return [x[1] for x in answer.json()["meta_info"]["output_token_logprobs"]]
        body = {"model": server.model, "prompt": PROBE_IDS, "max_tokens": PROBE_TOKENS, "temperature": 0.0,
                "ignore_eos": True, "return_token_ids": True}
        if salt is not None:
            body["cache_salt"] = salt
        answer = await server.http.post("/v1/completions", json=body)
        answer.raise_for_status()
        return answer.json()["choices"][0]["token_ids"]
    except (httpx.HTTPError, KeyError, ValueError):
        return None


async def versions(server: Server) -> list[str]:
    """The weight version everywhere the engine reports it (helpers.sglang_versions / vllm_versions;
    the contract's /v1/loads only with the plugin)."""
    found = []
    with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
        if server.engine == "sglang":
            found.append((await server.http.get("/model_info")).json()["weight_version"])
            answer = await server.http.post("/generate", json={"input_ids": [1, 15, 27], "sampling_params": {"max_new_tokens": 2}})
            found.append(answer.json()["meta_info"]["weight_version"])
        else:
            found.append((await server.http.get("/weight_info")).json()["weight_version"])
        if server.plugin:
            found.append((await server.http.get("/v1/loads")).json()["weight_version"])
    return [str(v) for v in found]


def generate(server: Server, route: str, prompt: list[int], max_tokens: int, salt: str) -> asyncio.Task:
    """One rollout request through *route*, in the background; the task gives
    ``{"ok", "finish", "tokens", "n"}`` (``tokens``: the output ids, where the route gives them)."""

    async def run() -> dict:
        sampling = {"max_new_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True}
        try:
            if route == "generate":
                answer = await server.http.post("/generate", json={"input_ids": prompt, "sampling_params": sampling, "return_logprob": True})
                if answer.status_code != 200:
                    return {"ok": False, "finish": f"http {answer.status_code}", "tokens": [], "n": 0}
                meta = answer.json()["meta_info"]
                tokens = [x[1] for x in meta.get("output_token_logprobs") or []]
                return {"ok": True, "finish": (meta.get("finish_reason") or {}).get("type"), "tokens": tokens,
                        "n": meta.get("completion_tokens", len(tokens))}
            if route == "contract":
                answer = await server.http.post("/partial_generate", json={"input_ids": prompt, "sampling_params": sampling})
                if answer.status_code != 200:
                    return {"ok": False, "finish": f"http {answer.status_code}", "tokens": [], "n": 0}
                body = answer.json()
                return {"ok": True, "finish": body["finish_reason"], "tokens": body["output_ids"], "n": len(body["output_ids"])}
            body = {"model": server.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True}
            if route == "salted":
                body["cache_salt"] = salt
            answer = await server.http.post("/v1/completions", json=body)
            if answer.status_code != 200:
                return {"ok": False, "finish": f"http {answer.status_code}", "tokens": [], "n": 0}
            body = answer.json()
            return {"ok": True, "finish": body["choices"][0].get("finish_reason"), "tokens": None,
                    "n": (body.get("usage") or {}).get("completion_tokens", 0)}
        except httpx.HTTPError as exc:
            return {"ok": False, "finish": type(exc).__name__, "tokens": [], "n": 0}

    return asyncio.create_task(run())
