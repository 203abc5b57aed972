"""Everything the vLLM plugin uses in vLLM is checked before it is relied on: a missing piece
stops startup with a message naming it and the vLLM version."""

import dataclasses

import pytest

from engine_plugins.contract.errors import StartupError
from engine_plugins.engines.vllm.facade import VllmEngine, check_names
from fakes.vllm import engine as fake
from fakes.vllm.server import fake_names


def test_an_engine_client_without_an_attribute_the_plugin_uses_stops_startup():
    llm = fake.AsyncLLM()
    del llm.renderer
    with pytest.raises(StartupError) as info:
        VllmEngine(fake_names(), llm)
    assert "renderer.render_cmpl_async" in str(info.value) and "vLLM 0.32.0+fake" in str(info.value)


def test_sampling_params_without_a_field_the_plugin_sets_stops_startup():
    @dataclasses.dataclass
    class OldSamplingParams:
        max_tokens: int = 16

    names = dataclasses.replace(fake_names(), SamplingParams=OldSamplingParams, version="0.31.0")
    with pytest.raises(StartupError) as info:
        check_names(names)
    assert "SamplingParams.detokenize" in str(info.value) and "vLLM 0.31.0" in str(info.value)


@pytest.mark.parametrize("version", ["0.25.0", "0.35.0", "1.0.0", "0.9.0"])
def test_a_vllm_outside_the_supported_range_stops_startup_naming_it_and_the_range(version):
    with pytest.raises(StartupError) as info:
        check_names(dataclasses.replace(fake_names(), version=version))
    assert f"vLLM {version} is not supported" in str(info.value) and "vLLM 0.26 to 0.34" in str(info.value)


@pytest.mark.parametrize("version", ["0.26.0", "0.27.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0+cpu", "0.33.0", "0.34.0", "0.34.1"])
def test_every_supported_vllm_version_passes_the_range_check(version):
    check_names(dataclasses.replace(fake_names(), version=version))


def test_a_release_below_the_range_is_refused_with_what_its_probe_found_missing():
    # The probe of vLLM 0.25.0's wheel (docs/engine-notes.md, "vLLM releases the plugin refuses").
    from engine_plugins.engines.probe import ProbeReport
    from engine_plugins.engines.vllm.manifest import MANIFEST

    lacking = ["vllm.plugins.endpoint_plugins.interface.EndpointPlugin.attach_router(app)",
               "vllm.plugins.endpoint_plugins.interface.EndpointPlugin.init_state(engine_client, state, args)"]
    with pytest.raises(StartupError) as info:
        MANIFEST.check_version("0.25.0", ProbeReport(missing=lacking))
    assert str(info.value) == ("engine_plugins: vLLM 0.25.0 is not supported; the plugin supports vLLM 0.26 to 0.34; "
                               f"vLLM 0.25.0 lacks {', '.join(lacking)}")
