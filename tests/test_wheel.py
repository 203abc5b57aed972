"""Only the product ships: the wheel built from this checkout holds the package and its engine
patches, and no test code or harness (no tests/, no fakes of the engines, no tools/: the launcher,
the patched overlays)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from targets import REPO

# Made by builds, editable installs and test runs; none of it is source.
NOT_SOURCE = (".git", ".venv", ".engines", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis")


def build_wheel(tmp_path) -> Path:
    """``pip wheel --no-deps`` of a copy of the checkout (so that the build leaves nothing in it):
    the wheel's path."""
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCE), symlinks=True)
    # No build isolation: the test extra brings setuptools (with bdist_wheel), so nothing is fetched.
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", str(source),
           "-w", str(tmp_path / "dist")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = (tmp_path / "dist").glob("engine_plugins-*.whl")
    return wheel


def test_the_wheel_holds_the_package_and_no_test_code(tmp_path):
    names = zipfile.ZipFile(build_wheel(tmp_path)).namelist()
    packaged = [n for n in names if ".dist-info/" not in n]
    assert "engine_plugins/engines/sglang/plugin.py" in packaged and "engine_plugins/engines/vllm/plugin.py" in packaged
    assert all(n.startswith("engine_plugins/") for n in packaged), [n for n in packaged if not n.startswith("engine_plugins/")]
    test_code = [n for n in packaged if "/testing/" in n or "fakes" in n or "/tests/" in n or n.split("/")[-1].startswith("test_")]
    assert test_code == [], test_code
    harness = [n for n in packaged if "launcher" in n or "overlay" in n or n.startswith("tools/")]
    assert harness == [], harness
    shipped_patches = {n.rsplit("/", 1)[-1] for n in packaged if n.startswith("engine_plugins/patches/")}
    assert shipped_patches == {p.name for p in (REPO / "patches").glob("*.patch")} != set()
