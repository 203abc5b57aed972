"""Puts a checkout's plugin in front of a shared engine virtualenv, without installing it there.

The engine venvs are big (GBs) and shared by every checkout on the machine, so the plugin is not
installed into them. Instead each checkout gets a small folder, put first on the engine server's
``PYTHONPATH``, holding a link to its ``engine_plugins`` package and a ``.dist-info`` with the
entry points of its ``pyproject.toml``. The engines find plugins through ``importlib.metadata``
entry points, which look at every ``sys.path`` entry, so this checkout's plugin is the one they load,
also in their child processes (which inherit the environment).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PACKAGE = "engine_plugins"


def plugin_site(repo_root: Path, site_dir: Path) -> Path:
    """Writes (or refreshes) the plugin folder for `repo_root` at `site_dir` and returns it.

    Idempotent: files are rewritten only when their content changes, so concurrent servers of one
    checkout never see a half-written file.
    """
    import tomllib  # Python 3.11+, as the engine tiers need (their torch wheels are for 3.11)

    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    site_dir.mkdir(parents=True, exist_ok=True)
    link = site_dir / PACKAGE
    if not link.is_symlink() or Path(os.readlink(link)) != repo_root / PACKAGE:
        _replace_symlink(link, repo_root / PACKAGE)
    dist_name = re.sub(r"[-_.]+", "_", name)
    dist_info = site_dir / f"{dist_name}-{version}.dist-info"
    for stale in site_dir.glob("*.dist-info"):
        if stale != dist_info:
            for child in stale.iterdir():
                child.unlink()
            stale.rmdir()
    dist_info.mkdir(exist_ok=True)
    _write_if_changed(dist_info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    _write_if_changed(dist_info / "entry_points.txt", _entry_points_txt(project.get("entry-points", {})))
    return site_dir


def _entry_points_txt(groups: dict[str, dict[str, str]]) -> str:
    """The entry_points.txt format (an INI file, one section per group)."""
    sections = []
    for group, entries in sorted(groups.items()):
        lines = [f"[{group}]", *(f"{key} = {value}" for key, value in sorted(entries.items()))]
        sections.append("\n".join(lines) + "\n")
    return "\n".join(sections)


def _replace_symlink(link: Path, target: Path) -> None:
    """Points `link` at `target` atomically (a rename over the old link)."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target, target_is_directory=True)
    os.replace(tmp, link)


def _write_if_changed(path: Path, text: str) -> None:
    """Writes `text` to `path` through a rename, unless it already holds exactly that."""
    if path.is_file() and path.read_text() == text:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
