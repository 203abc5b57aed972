"""The startup warning for control routes served without a key beyond loopback."""

from engine_plugins.host.exposure import is_loopback, unguarded_warning


def test_loopback_addresses_and_names_need_no_warning():
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host
        assert unguarded_warning(host, []) is None, host


def test_every_other_address_without_a_key_is_warned_about_and_a_key_silences_it():
    for host in ("0.0.0.0", "::", "", None, "10.1.2.3", "node-7.cluster"):
        assert not is_loopback(host), host
        message = unguarded_warning(host, [None, ""])
        assert message is not None and "ENGINE_PLUGINS_API_KEY" in message and "--api-key" in message, host
        assert unguarded_warning(host, [None, "a-key"]) is None, host


def test_the_redacting_filter_masks_secrets_in_a_record_and_keeps_it():
    import logging

    from engine_plugins.host.exposure import RedactSecrets

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "server_args=%s", ({"api_key": "s3cret", "port": 1},), None)
    assert RedactSecrets(["s3cret", None]).filter(record) is True
    assert record.getMessage() == "server_args={'api_key': '***', 'port': 1}"


def test_a_keyless_server_serves_and_says_so_and_require_key_refuses_it():
    import logging

    import pytest

    from engine_plugins.contract.errors import StartupError
    from engine_plugins.host.exposure import key_policy

    assert key_policy("0.0.0.0", [None, "k"], require_key=True) is None
    level, message = key_policy("0.0.0.0", [None, ""], require_key=False)
    assert level == logging.WARNING and "without an API key" in message
    level, message = key_policy("127.0.0.1", [], require_key=False)
    assert level == logging.INFO and "without an API key" in message and "ENGINE_PLUGINS_REQUIRE_KEY=1" in message
    for host in ("127.0.0.1", "0.0.0.0"):
        with pytest.raises(StartupError, match="ENGINE_PLUGINS_REQUIRE_KEY"):
            key_policy(host, [None], require_key=True)
