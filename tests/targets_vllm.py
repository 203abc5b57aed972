"""vLLM contract targets: ``vllm-stub`` (the real plugin on a fake AsyncLLM) and ``vllm`` (a real vLLM 0.32)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from targets import API_KEY, REPO, Target, module_server


@contextlib.contextmanager
def fake_vllm_server(tmp_dir: Path, *args: str, api_key: str = API_KEY) -> Iterator[Target]:
    """The fake AsyncLLM with the real plugin, served by uvicorn in its own process."""
    with module_server(tmp_dir, "fakes.vllm", "--api-key", api_key, *args) as server:
        yield Target(name="vllm-stub", url=server.url, api_key=api_key, long_tokens=1500, log_tail=server.log_tail)


@contextlib.contextmanager
def real_vllm_server(tmp_dir: Path, *extra_args: str, env: dict | None = None, api_key: str = API_KEY) -> Iterator[Target]:
    """A real vLLM 0.32 (CPU) OpenAI server with VLLM_PLUGINS=engine_plugins and --api-key."""
    from engine_plugins.launcher.engine_server import EngineServer, ensure_engine

    ensure_engine("vllm", REPO)
    server_env = {"VLLM_PLUGINS": "engine_plugins", **(env or {})}
    # long_tokens: about 7 s of generation for one request with the tiny model, longer than the
    # stalls a client sees on two busy cores, so no request finishes while a test arranges things.
    with EngineServer("vllm", REPO, api_key=api_key, env=server_env, extra_args=extra_args,
                      log_path=tmp_dir / "vllm.log") as server:
        yield Target(name="vllm", url=server.url, api_key=api_key, long_tokens=1500, log_tail=lambda: server.log_tail(80))


TARGETS = {
    "vllm-stub": lambda tmp: fake_vllm_server(tmp),
    "vllm": lambda tmp: real_vllm_server(tmp),
}
