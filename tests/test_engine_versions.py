"""The static probe: every supported engine release, read from its wheel (nothing imported), has
every name the plugin uses, and the probe finds the differences the shims cover.

The wheels come from ``scripts/setup-engines.sh wheels`` (pip download --no-deps, once per user).
The check is the engines' manifests' own (``MANIFEST.probe``, engine_plugins.engines.engine_manifest), so
what this test reads in a wheel is what the plugin checks on the installed engine at startup, and
on the fakes; the features each release is expected to have are in the manifests too.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from engine_plugins.engines.engine_manifest import EngineManifest
from engine_plugins.engines.probe import EngineName, ProbeReport, SourceResolver, check
from engine_plugins.contract.errors import StartupError
from engine_plugins.engines.sglang import facade as sglang_facade
from engine_plugins.engines.sglang.manifest import MANIFEST as SGLANG
from engine_plugins.engines.vllm.manifest import MANIFEST as VLLM
from engine_versions import PROBED, REFUSED, REPO, SUPPORTED, wheel_source

MANIFESTS = {"vllm": VLLM, "sglang": SGLANG}


@pytest.fixture(scope="session")
def wheels() -> None:
    """Every probed release's wheel (supported or refused), downloaded and unpacked (idempotent)."""
    if all((wheel_source(v) / ".unpacked").exists() for v in PROBED):
        return  # the script would only wait for its lock to say so
    subprocess.run(["bash", str(REPO / "scripts" / "setup-engines.sh"), "wheels"], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True)


def test_every_supported_release_has_its_expected_features_listed():
    listed = [(engine, version) for engine, manifest in MANIFESTS.items() for version in manifest.releases]
    assert sorted(listed) == sorted((v.engine, v.version) for v in SUPPORTED)
    for manifest in MANIFESTS.values():
        for version, features in manifest.releases.items():
            assert manifest.in_range(version) and set(features) == {f.key for f in manifest.features}


@pytest.mark.parametrize("release", SUPPORTED, ids=str)
def test_a_supported_release_has_every_name_the_plugin_uses(wheels, release):
    manifest = MANIFESTS[release.engine]
    manifest.check_version(release.version)
    report = manifest.probe(SourceResolver(wheel_source(release)))
    assert report.missing == []
    assert report.features == manifest.releases[release.version]


@pytest.mark.parametrize("version", ["0.5.12", "0.5.15", "0.5.23"])
def test_one_feature_probed_alone_is_what_the_whole_probe_says(wheels, version):
    # The DP controller's process probes only the features it needs (MANIFEST.has).
    resolver = SourceResolver(wheel_source(next(v for v in SUPPORTED if (v.engine, v.version) == ("sglang", version))))
    for key in ("sock_recv", "runtime_context"):
        assert SGLANG.has(key, resolver) == SGLANG.releases[version][key]


def test_the_probe_reports_a_missing_name_and_a_missing_parameter(wheels):
    release = next(v for v in SUPPORTED if (v.engine, v.version) == ("vllm", "0.31.0"))
    required = (
        EngineName("vllm.v1.engine.async_llm", "AsyncLLM.pause_generation", ("mode", "wait_for_everything")),
        EngineName("vllm.outputs", "CompletionOutput.weight_versions"),
        EngineName("vllm.v1.engine.async_llm", "AsyncLLM.no_such_attribute", on_self=True),
        EngineName("vllm.no_such_module", "Anything"),
    )
    report = check(SourceResolver(wheel_source(release)), required, ())
    assert report.missing == [
        "vllm.v1.engine.async_llm.AsyncLLM.pause_generation(mode, wait_for_everything) (no parameter wait_for_everything)",
        "vllm.outputs.CompletionOutput.weight_versions",
        "vllm.v1.engine.async_llm.AsyncLLM.no_such_attribute",
        "vllm.no_such_module.Anything",
    ]


@pytest.mark.parametrize("engine, version", [("vllm", "0.25.0"), ("vllm", "0.35.0"), ("sglang", "0.5.11"), ("sglang", "0.6.0")])
def test_a_release_outside_the_range_is_refused_by_name(engine, version):
    with pytest.raises(StartupError) as info:
        MANIFESTS[engine].check_version(version)
    assert f"{version} is not supported" in str(info.value) and MANIFESTS[engine].supported in str(info.value)


@pytest.mark.parametrize("release", REFUSED, ids=str)
def test_a_refused_release_a_framework_pins_is_refused_by_name_and_lacks_what_the_docs_count(wheels, release):
    # The refusal at startup, and the reason: what the static probe finds missing in its wheel
    # (docs/engine-notes.md lists the names; requirements/engine-refused.txt their count).
    manifest = MANIFESTS[release.engine]
    with pytest.raises(StartupError) as info:
        manifest.check_version(release.version)
    assert f"{release.version} is not supported" in str(info.value) and manifest.supported in str(info.value)
    report = manifest.probe(SourceResolver(wheel_source(release)))
    assert len(report.missing) == release.missing, report.missing


# Every release's real server, and the fakes that follow a release.
LOG_TARGETS = {**{str(r): (r.engine, r.version) for r in SUPPORTED if r.tested == "real"},
               "vllm-0.31-stub": ("vllm", "0.31.0"), "vllm-0.34-stub": ("vllm", "0.34.0"),
               "vllm-0.26-stub": ("vllm", "0.26.0"),
               "sglang-0.5.19-stub": ("sglang", "0.5.19"), "sglang-0.5.18-stub": ("sglang", "0.5.18"),
               "sglang-0.5.17-stub": ("sglang", "0.5.17"), "sglang-0.5.16-stub": ("sglang", "0.5.16"),
               "sglang-0.5.12-stub": ("sglang", "0.5.12")}


@pytest.mark.targets(*LOG_TARGETS)
def test_the_startup_log_names_the_version_and_its_shims(target):
    engine, version = LOG_TARGETS[target.name]
    features = MANIFESTS[engine].releases[version]
    log = target.log_tail()
    if engine == "vllm":
        shims = VLLM.shims(ProbeReport(features=features))
        assert f"serving the RL control contract on vLLM {version}" in log
        assert f"shims: {'; '.join(shims)}" in log
    else:
        # A fake names itself: "SGLang 0.5.19 (engine_plugins fake): contract mounted".
        assert re.search(rf"SGLang {re.escape(version)}( \(engine_plugins fake\))?: contract mounted", log)
        shims = SGLANG.shims(ProbeReport(features=features))
        assert f"shims: {'; '.join(shims) or 'none'} (supported: SGLang {SGLANG.supported})" in log
        for feature in SGLANG.features:
            assert (feature.shim in log) == (features[feature.key] == feature.on_presence), feature.key


def test_a_release_below_the_range_whose_own_imports_fail_is_still_refused_by_name(monkeypatch):
    # An SGLang below the range layered over a newer transformers raises ValueError (0.5.19 over
    # the pinned venv's: "'qwen3_asr' is already used by a Transformers config") when the probe
    # imports its http_server: the refusal stands.
    def failing_probe(manifest, resolver=None):
        raise ValueError("'qwen3_asr' is already used by a Transformers config, pick another name.")

    monkeypatch.setattr(EngineManifest, "installed_version", lambda manifest: "0.5.11")
    monkeypatch.setattr(EngineManifest, "probe", failing_probe)
    with pytest.raises(StartupError) as info:
        sglang_facade.load_names()
    assert str(info.value) == f"engine_plugins: SGLang 0.5.11 is not supported; the plugin supports SGLang {SGLANG.supported}"
