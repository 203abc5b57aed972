"""Patched *overlays* of an engine package, for the tests' patched engines.

An overlay is hard links of every file of the installed package, with only the files a patch
changes replaced by patched copies: a directory put ahead of site-packages (``PYTHONPATH``) runs
the patched engine without touching the shared venv.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from engine_plugins.engines.patching import PatchError, patched_files, run_patch


def apply_to_tree(tree: Path, patch: Path) -> subprocess.CompletedProcess:
    """``patch -p1`` of *patch* in *tree*, no fuzz allowed; the completed process."""
    return run_patch(tree, patch)


def build_overlay(package_dir: Path, patch: Path, overlay_root: Path) -> Path:
    """A patched copy of an engine package that costs only the patched files: *overlay_root*
    gets ``<package>/``, hard links of every file in *package_dir*, with each file the patch
    changes replaced by a patched copy (never patched through a link, which would change the
    original). Put *overlay_root* ahead of site-packages (``PYTHONPATH``) to run the patched
    engine. Idempotent: a stamp names the patch's hash; a build goes to a temporary folder
    renamed into place, under a lock, so concurrent callers never see half an overlay."""
    package_dir, overlay_root = Path(package_dir), Path(overlay_root)
    stamp = hashlib.sha256(Path(patch).read_bytes() + str(package_dir).encode()).hexdigest()
    stamp_file = overlay_root / ".engine-plugins-overlay"
    overlay_root.parent.mkdir(parents=True, exist_ok=True)
    with open(overlay_root.parent / f".{overlay_root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp_file.is_file() and stamp_file.read_text() == stamp:
            return overlay_root
        staging = Path(tempfile.mkdtemp(prefix=f".{overlay_root.name}-", dir=overlay_root.parent))
        try:
            subprocess.run(["cp", "-al", str(package_dir), str(staging / package_dir.name)], check=True)
            for rel in patched_files(patch):
                target = staging / rel
                if target.exists():
                    # Break the hard link: the patched file is this overlay's own.
                    data = target.read_bytes()
                    target.unlink()
                    target.write_bytes(data)
                # Its compiled form is a link to the original's: drop it, Python recompiles.
                for pyc in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
                    pyc.unlink()
            result = apply_to_tree(staging, patch)
            if result.returncode != 0:
                raise PatchError(f"{patch.name} does not apply to {package_dir}:\n{result.stdout}{result.stderr}")
            (staging / stamp_file.name).write_text(stamp)
            if overlay_root.exists():
                shutil.rmtree(overlay_root)
            os.replace(staging, overlay_root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return overlay_root
