"""One check of an engine against its manifest, wherever the engine comes from.

Each engine folder's ``manifest.py`` is data only, one :class:`EngineManifest`: the names the
plugin uses in the engine, the supported range, the differences between releases that shims
cover, and the features each supported release is expected to have. This module checks an engine
against it, always with :func:`engine_probe.check <engine_plugins.engines.probe.check>`:

- the installed engine at startup (:meth:`EngineManifest.check_installed`, modules imported);
- a release's wheel or the installed engine's source (:meth:`EngineManifest.probe` with a
  :class:`~engine_plugins.engines.probe.SourceResolver`: the static probe and ``doctor``);
- the objects a facade holds, real or a fake's (:meth:`EngineManifest.check_objects`).

The version helpers (parsing, the range check) are here too, for both engines. Nothing here
imports an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version as dist_version
from typing import Any, Callable, Mapping, Optional, Sequence

from engine_plugins.engines.probe import (
    EngineName,
    Feature,
    ImportResolver,
    ObjectResolver,
    ProbeReport,
    Resolver,
    check,
)
from engine_plugins.contract.errors import StartupError

NOT_INSTALLED = "(not installed)"


@dataclass(frozen=True)
class EngineManifest:
    """What the plugin expects of one engine: the same shape for every engine."""

    engine: str
    """The engine's name in messages (``vLLM``, ``SGLang``)."""
    distributions: tuple[str, ...]
    """Its distributions on PyPI, the first one installed gives the version."""
    lowest: str
    highest: str
    """The supported releases, compared on the parts each names (``0.34`` admits every 0.34.x)."""
    required: tuple[EngineName, ...]
    """Every name the plugin uses in the engine, with the parameters that matter."""
    features: tuple[Feature, ...] = ()
    """The differences between supported releases, each with the shim that covers it."""
    releases: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)
    """Per supported release (as ``requirements/engine-versions.txt`` names it), which features it
    has, read from its source (``docs/engine-notes.md``); the static probe checks each wheel."""

    @property
    def supported(self) -> str:
        """The supported range in words: ``0.27 to 0.34``."""
        return f"{self.lowest} to {self.highest}"

    def pip_spec(self) -> str:
        """The supported range as a pip specifier (``>=0.27,<0.35``)."""
        *head, last = self.highest.split(".")
        return f">={self.lowest},<{'.'.join([*head, str(int(last) + 1)])}"

    def in_range(self, version: str) -> bool:
        """Whether *version* is a supported release."""
        return in_range(version, self.lowest, self.highest)

    # --- the checks -------------------------------------------------------------------------

    def probe(self, resolver: Optional[Resolver] = None) -> ProbeReport:
        """Every required name and every feature, in the installed engine by default."""
        return check(resolver or ImportResolver(), self.required, self.features)

    def has(self, key: str, resolver: Optional[Resolver] = None) -> bool:
        """Whether the installed engine (or *resolver*'s) has the feature *key*: one feature's
        probe, for a process that does not run the whole startup check."""
        feature = next(f for f in self.features if f.key == key)
        return check(resolver or ImportResolver(), (), (feature,)).features[key]

    def shims(self, report: ProbeReport) -> list[str]:
        """The shims a probe report turns on, in words (the startup log's and doctor's)."""
        return report.active_shims(self.features)

    def check_version(self, version: str, report: Optional[ProbeReport] = None) -> None:
        """StartupError naming *version* and the supported range when it lies outside; with
        *report* (the probe of that release), also what it lacks of what the plugin uses."""
        if not self.in_range(version):
            lacks = f"; {self.engine} {version} lacks {', '.join(report.missing)}" if report is not None and report.missing else ""
            raise StartupError(f"engine_plugins: {self.engine} {version} is not supported; {self._supports()}{lacks}")

    def check_installed(self, probe: Optional[Callable[[], ProbeReport]] = None) -> ProbeReport:
        """The startup check of the installed engine: a release outside the range is refused by
        name (even when its own modules fail to import), then every required name must be
        there. Returns the probe's report (its features switch the shims on). *probe* defaults
        to :meth:`probe` on the imported engine."""
        probe = probe or self.probe
        self.refuse_outside_range(probe)
        report = probe()
        if report.missing:
            raise self.missing_error(self.installed_version(), report.missing)
        return report

    def refuse_outside_range(self, probe: Optional[Callable[[], ProbeReport]] = None) -> None:
        """StartupError when the installed release lies outside the range, naming it and what
        *probe* (:meth:`probe` by default) finds it lacks, if its modules import at all."""
        installed = self.installed_version()
        if installed != NOT_INSTALLED and not self.in_range(installed):
            self.check_version(installed, best_effort(probe or self.probe))

    def check_objects(self, version: str, objects: Mapping[str, Any]) -> None:
        """Check the objects a facade holds (the engine's own, or a fake's), ``{module: object}``
        as :class:`~engine_plugins.engines.probe.ObjectResolver` reads them: *version* in range,
        and every required name they stand for present, with its parameters."""
        self.check_version(version)
        resolver = ObjectResolver(objects)
        report = check(resolver, [n for n in self.required if resolver.covers(n)], ())
        if report.missing:
            raise self.missing_error(version, report.missing)

    # --- versions and messages ----------------------------------------------------------------

    def installed_version(self) -> str:
        """The installed engine's version from package metadata (nothing imported), or
        :data:`NOT_INSTALLED`."""
        for dist in self.distributions:
            try:
                return dist_version(dist)
            except PackageNotFoundError:
                continue
            except Exception:
                break
        return NOT_INSTALLED

    def missing_error(self, version: str, missing: Sequence[str]) -> StartupError:
        """The StartupError naming *version* and what it lacks."""
        return StartupError(f"engine_plugins: {self.engine} {version} lacks what the plugin needs: "
                            f"{', '.join(missing)}; {self._supports()}")

    def import_error(self, version: str, exc: BaseException) -> StartupError:
        """The StartupError for a module the plugin imports that *version* cannot import."""
        return StartupError(f"engine_plugins: {self.engine} {version} lacks a module the plugin needs ({exc}); "
                            f"{self._supports()}")

    def missing_on_instance(self, what: str, version: str, missing: Sequence[str]) -> StartupError:
        """The StartupError for attributes an engine object (*what*) lacks once constructed."""
        return StartupError(f"engine_plugins: {self.engine} {version}: {what} has no {', '.join(missing)}; "
                            f"{self._supports()}")

    def _supports(self) -> str:
        return f"the plugin supports {self.engine} {self.supported}"


def missing_attributes(obj: Any, paths: Sequence[str]) -> list[str]:
    """The dotted attribute paths (``model_config.max_model_len``) that *obj* lacks: what an
    instance sets on itself, which neither the class nor the source shows."""
    missing = []
    for path in paths:
        target = obj
        for part in path.split("."):
            if not hasattr(target, part):
                missing.append(path)
                break
            target = getattr(target, part)
    return missing


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.31.0+cpu"`` -> ``(0, 31, 0)``; the numeric release part only."""
    out = []
    for part in version.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
        if not part.isdigit():
            break
    return tuple(out)


def in_range(version: str, lowest: str, highest: str) -> bool:
    """Whether *version*'s release lies in ``[lowest, highest]``, compared on the parts *highest*
    names (so ``highest="0.33"`` admits every 0.33.x)."""
    v = version_tuple(version)
    low, high = version_tuple(lowest), version_tuple(highest)
    return bool(v) and v[: len(low)] >= low and v[: len(high)] <= high


def at_least(version: str, release: str) -> bool:
    """Whether *version* is *release* or later, compared on the parts *release* names."""
    return version_tuple(version)[: len(version_tuple(release))] >= version_tuple(release)


def best_effort(probe: Callable[[], ProbeReport]) -> Optional[ProbeReport]:
    """*probe*'s report, or None if it raises: for the message that refuses a release outside the
    range, whose own modules may fail to import (an old SGLang beside a newer transformers raises
    ValueError on import), so that the refusal itself is never lost."""
    try:
        return probe()
    except Exception:
        return None
