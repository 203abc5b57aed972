"""ENGINE_PLUGINS_* variables: typed, validated, and a bad value names its variable."""

import pytest

from engine_plugins.host.config import ENV_VARS, ConfigError, Settings, describe, load_settings


def test_defaults_when_nothing_is_set():
    assert load_settings({}) == Settings()
    assert Settings().abort_on_weight_version is False, "a version bump keeps in-flight work by default"


def test_values_are_parsed():
    settings = load_settings(
        {
            "ENGINE_PLUGINS_ROUTE_PREFIX": "/rl",
            "ENGINE_PLUGINS_API_KEY": "k",
            "ENGINE_PLUGINS_ABORT_TIMEOUT_S": "2.5",
            "ENGINE_PLUGINS_ABORT_ON_WEIGHT_VERSION": "yes",
            "ENGINE_PLUGINS_PLUGINS": "a, b,,",
            "ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES": "0",
            "ENGINE_PLUGINS_TRACE": "on",
        }
    )
    assert settings == Settings(
        route_prefix="/rl",
        api_key="k",
        abort_timeout_s=2.5,
        abort_on_weight_version=True,
        plugins=frozenset({"a", "b"}),
        replace_native_routes=False,
        trace=True,
    )
    assert describe(settings)["ENGINE_PLUGINS_API_KEY"] == "***"


@pytest.mark.parametrize(
    "var,value",
    [
        ("ENGINE_PLUGINS_ROUTE_PREFIX", "rl"),
        ("ENGINE_PLUGINS_ROUTE_PREFIX", "/rl/"),
        ("ENGINE_PLUGINS_ABORT_TIMEOUT_S", "soon"),
        ("ENGINE_PLUGINS_ABORT_TIMEOUT_S", "0"),
        ("ENGINE_PLUGINS_ABORT_TIMEOUT_S", "-3"),
        ("ENGINE_PLUGINS_ABORT_TIMEOUT_S", "inf"),
        ("ENGINE_PLUGINS_ABORT_TIMEOUT_S", "nan"),
        ("ENGINE_PLUGINS_ABORT_ON_WEIGHT_VERSION", "maybe"),
        ("ENGINE_PLUGINS_REPLACE_NATIVE_ROUTES", "2"),
        ("ENGINE_PLUGINS_TRACE", "verbose"),
        ("ENGINE_PLUGINS_EXACT_TOKEN_VERSIONS", "exact"),
    ],
)
def test_a_bad_value_names_its_variable(var, value):
    with pytest.raises(ConfigError, match=var):
        load_settings({var: value})


def test_an_unknown_engine_plugins_variable_is_refused_by_name():
    with pytest.raises(ConfigError, match="ENGINE_PLUGINS_ABORT_TIMEOUT\\b"):
        load_settings({"ENGINE_PLUGINS_ABORT_TIMEOUT": "5"})


def test_every_variable_is_in_the_readme(readme):
    for var in ENV_VARS:
        assert f"`{var}`" in readme
