"""Fixtures of the patched-engine tier: a real SGLang 0.5.23 and a real vLLM 0.32 run from their
patch (patches/), with the plugin NOT loaded, so that the checks see the engines' own routes.

Each patched engine is an overlay beside the shared engine venvs
(``<engines dir>/<engine>-patched/<version>/``, :func:`engine_plugins.patching.build_overlay`):
hard links of the engine's package with only the patched files replaced, put ahead of the venv's
site-packages on ``PYTHONPATH``. Built by the first run on a machine (a second or so), reused after.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine_plugins import patching
from engine_plugins.launcher.engine_server import EngineServer, engines_dir, ensure_engine
from engine_versions import SUPPORTED
from targets import API_KEY, REPO

PINNED = {r.engine: r.version for r in SUPPORTED if r.tested == "pinned"}


class UnpluggedServer(EngineServer):
    """A real engine server run from *overlay* (ahead of its venv), without this project's plugin:
    the plugin's folder is left off ``PYTHONPATH`` and no vLLM plugin is named."""

    def __init__(self, engine: str, overlay: Path, **kwargs) -> None:
        super().__init__(engine, REPO, **kwargs)
        self.overlay = overlay

    def environment(self) -> dict[str, str]:
        """The launcher's environment, with the overlay first and the plugin gone."""
        env = super().environment()
        shim = str(self.paths.shim_dir) if self.paths.shim_dir else None
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.overlay), shim) if p)
        env.pop("VLLM_PLUGINS", None)
        return env


def patched_overlay(engine: str, version: str | None = None) -> tuple[Path, Path]:
    """The *engine* package of the pinned venv (or of *version*'s layered venv) with its patch
    applied, as an overlay (built once); with that venv's python."""
    paths = ensure_engine(engine, REPO, version=version)
    [site] = (paths.venv / "lib").glob("python3.*/site-packages")
    version = version or PINNED[engine]
    patch = patching.patch_for(engine, version, REPO / "patches")
    return patching.build_overlay(site / engine, patch, engines_dir() / f"{engine}-patched" / version), paths.python


def pytest_collection_modifyitems(config, items):
    """A run narrowed with ``--target`` keeps an engine's patched checks only with that engine's
    real target (``--target stub`` starts no real engine)."""
    chosen = config.getoption("target")
    if not chosen:
        return
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("patched_engine")
        (drop if marker is not None and marker.args[0] not in chosen else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config):
    config.addinivalue_line("markers", "patched_engine(engine): drives a real patched engine without the plugin")


@pytest.fixture(scope="module")
def patched_sglang(tmp_path_factory):
    """A real SGLang 0.5.23 from its patched overlay, no plugin, with the suite's API key."""
    overlay, _ = patched_overlay("sglang")
    with UnpluggedServer("sglang", overlay, api_key=API_KEY, extra_args=["--enable-metrics"],
                         log_path=tmp_path_factory.mktemp("patched-sglang") / "sglang.log") as server:
        yield server


@pytest.fixture(scope="module")
def patched_vllm(tmp_path_factory):
    """A real vLLM 0.32 from its patched overlay, no plugin, in dev mode (its RL routes), with
    the suite's API key."""
    overlay, _ = patched_overlay("vllm")
    with UnpluggedServer("vllm", overlay, api_key=API_KEY, env={"VLLM_SERVER_DEV_MODE": "1"},
                         log_path=tmp_path_factory.mktemp("patched-vllm") / "vllm.log") as server:
        yield server
