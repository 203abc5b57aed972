"""patches/: each engine patch applies cleanly to the engine version it names, and the patched
files still compile. (Their behaviour is the plugin's, which the real-engine tiers show.)"""

import py_compile
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engine_plugins.launcher.engine_server import ensure_engine
from targets import REPO

PATCHES = sorted((REPO / "patches").glob("*.patch"))


def _site_packages(engine: str) -> Path:
    paths = ensure_engine(engine, REPO)
    [site] = (paths.venv / "lib").glob("python3.*/site-packages")
    return site


@pytest.mark.parametrize("patch", PATCHES, ids=[p.name for p in PATCHES])
def test_patch_applies_to_its_engine_and_compiles(patch, tmp_path):
    engine = patch.name.split("-", 1)[0]
    site = _site_packages(engine)
    touched = sorted(set(re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(), flags=re.M)))
    assert touched, "a patch names the files it changes"
    for rel in touched:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(site / rel, tmp_path / rel)
    result = subprocess.run(["patch", "-p1", "--forward", "-i", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for rel in touched:
        py_compile.compile(str(tmp_path / rel), doraise=True)
