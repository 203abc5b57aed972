"""vLLM contract targets: ``vllm-stub`` (the real plugin on a fake AsyncLLM) and ``vllm`` (a real vLLM 0.32)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from targets import API_KEY, REPO, Target, _tail, free_port, wait_healthy


@contextlib.contextmanager
def fake_vllm_server(tmp_dir: Path, *args: str, api_key: str = API_KEY) -> Iterator[Target]:
    """The fake AsyncLLM with the real plugin, served by uvicorn in its own process."""
    port = free_port()
    log = tmp_dir / f"fake-vllm-{port}.log"
    cmd = [sys.executable, "-m", "engine_plugins.testing.fake_vllm", "--port", str(port), "--api-key", api_key, *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINE_PLUGINS_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 30, log)
        yield Target(name="vllm-stub", url=url, api_key=api_key, long_tokens=1500, log_tail=lambda: _tail(log))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def real_vllm_server(tmp_dir: Path, *extra_args: str, env: dict | None = None, api_key: str = API_KEY) -> Iterator[Target]:
    """A real vLLM 0.32 (CPU) OpenAI server with VLLM_PLUGINS=engine_plugins and --api-key."""
    from engine_plugins.testing.engine_server import EngineServer, ensure_engine

    ensure_engine("vllm", REPO)
    server_env = {"VLLM_PLUGINS": "engine_plugins", **(env or {})}
    # long_tokens: as long as the tiny model allows (2048 positions; its rotary cache fails past
    # them), so that no request finishes while a test arranges its situation on two busy cores.
    with EngineServer("vllm", REPO, api_key=api_key, env=server_env, extra_args=extra_args,
                      log_path=tmp_dir / "vllm.log") as server:
        yield Target(name="vllm", url=server.url, api_key=api_key, long_tokens=2000, log_tail=lambda: server.log_tail(80))


TARGETS = {
    "vllm-stub": lambda tmp: fake_vllm_server(tmp),
    "vllm": lambda tmp: real_vllm_server(tmp),
}
