"""Fixtures of the patched-engine tier: a real SGLang 0.5.23 and a real vLLM 0.32 run from their
patch (patches/), with the plugin NOT loaded, so that the checks see the engines' own routes; and,
only when named (``--target vllm@0.24.0-patched``, make test-releases), a refused release's.

Each patched engine is an overlay beside the shared engine venvs
(``<engines dir>/<engine>-patched/<version>/``, :func:`tools.overlays.build_overlay`):
hard links of the engine's package with only the patched files replaced, put ahead of the venv's
site-packages on ``PYTHONPATH``. Built by the first run on a machine (a second or so), reused after.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine_plugins.engines import patching
from tools import overlays
from tools.launcher.engine_server import EngineServer, engines_dir, ensure_engine
from engine_versions import PATCHED_TARGETS, SUPPORTED, RefusedRelease
from targets import API_KEY, REPO

PINNED = {r.engine: r.version for r in SUPPORTED if r.tested == "pinned"}


class UnpluggedServer(EngineServer):
    """A real engine server run from *overlay* (ahead of its venv), without this project's plugin:
    neither the plugin's folder nor this checkout is on the server's path, and no vLLM plugin is
    allowed."""

    def __init__(self, engine: str, overlay: Path, **kwargs) -> None:
        super().__init__(engine, REPO, **kwargs)  # version=: that release's layered venv
        self.overlay = overlay

    def environment(self) -> dict[str, str]:
        """The launcher's environment, with the overlay first and the plugin gone."""
        env = super().environment()
        shim = str(self.paths.shim_dir) if self.paths.shim_dir else None
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.overlay), shim) if p)
        # `python -m` would put the server's working directory, this checkout, first on sys.path,
        # where the editable install's metadata lists the plugin's entry points.
        env["PYTHONSAFEPATH"] = "1"
        # An empty allowlist: no vLLM plugin of any group loads (unset, general plugins all would).
        env["VLLM_PLUGINS"] = ""
        return env


def patched_overlay(engine: str, version: str | None = None) -> tuple[Path, Path]:
    """The *engine* package of the pinned venv (or of *version*'s layered venv) with its patch
    applied, as an overlay (built once); with that venv's python."""
    paths = ensure_engine(engine, REPO, version=version)
    [site] = (paths.venv / "lib").glob("python3.*/site-packages")
    version = version or PINNED[engine]
    patch = patching.patch_for(engine, version, REPO / "patches")
    return overlays.build_overlay(site / engine, patch, engines_dir() / f"{engine}-patched" / version), paths.python


def _served_vllm(config) -> list:
    """The vLLM releases whose patched server the run starts: the pinned one (unless ``--target``
    leaves the vllm target out) and each refused release named as its patched target."""
    chosen = config.getoption("target")
    pinned = [r for r in SUPPORTED if r.engine == "vllm" and r.tested == "pinned"]
    refused = [r for name, r in PATCHED_TARGETS.items() if r.engine == "vllm" and name in (chosen or ())]
    return (pinned if not chosen or "vllm" in chosen else []) + refused


def pytest_generate_tests(metafunc):
    if "patched_vllm" in metafunc.fixturenames:
        metafunc.parametrize("patched_vllm", _served_vllm(metafunc.config), ids=str, indirect=True, scope="module")


def pytest_collection_modifyitems(config, items):
    """A run narrowed with ``--target`` keeps an engine's patched checks only with that engine's
    real target (``--target stub`` starts no real engine); a check on a refused release's patched
    code runs only when its patched target is named, whatever the run."""
    chosen = config.getoption("target") or ()
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("patched_engine")
        params = getattr(item, "callspec", None).params if hasattr(item, "callspec") else {}
        release = params.get("patched_vllm", params.get("release"))
        if isinstance(release, RefusedRelease):
            named = f"{release}-patched" in chosen
        else:
            named = marker is None or not chosen or marker.args[0] in chosen
        (keep if named else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config):
    config.addinivalue_line("markers", "patched_engine(engine): drives a real patched engine without the plugin (so: real, tests/tiers.py)")


# The SGLang releases whose patched server runs the checks: the pinned 0.5.23, and 0.5.20 for the
# other form of the patch (0.5.20 and 0.5.21 keep a request's rids, not its states, across the
# pause gate, and have no _release_lora_once). Each other release's patch is one of these two,
# fitted to its lines; tests/test_patches.py applies every one.
SGLANG_SERVED = [r for r in SUPPORTED if r.engine == "sglang" and (r.tested == "pinned" or r.version == "0.5.20")]


@pytest.fixture(scope="module", params=SGLANG_SERVED, ids=str)
def patched_sglang(request, tmp_path_factory):
    """A real SGLang from its patched overlay, no plugin, with the suite's API key."""
    release = request.param
    version = None if release.tested == "pinned" else release.version
    overlay, _ = patched_overlay("sglang", version)
    with UnpluggedServer("sglang", overlay, api_key=API_KEY, extra_args=["--enable-metrics"], version=version,
                         log_path=tmp_path_factory.mktemp(f"patched-sglang-{release.version}") / "sglang.log") as server:
        yield server


@pytest.fixture(scope="module")
def patched_vllm(request, tmp_path_factory):
    """A real vLLM from its patched overlay (the pinned 0.32, or a refused release named with
    --target, in its layered venv), no plugin, in dev mode (its RL routes), with the suite's API
    key. ``server.release`` is the release."""
    release = request.param
    version = None if getattr(release, "tested", None) == "pinned" else release.version
    overlay, _ = patched_overlay("vllm", version)
    with UnpluggedServer("vllm", overlay, api_key=API_KEY, env={"VLLM_SERVER_DEV_MODE": "1"}, version=version,
                         log_path=tmp_path_factory.mktemp(f"patched-vllm-{release.version}") / "vllm.log") as server:
        server.release = release
        yield server
