"""The startup warning for control routes served without a key beyond loopback."""

from engine_plugins.exposure import is_loopback, unguarded_warning


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

    from engine_plugins.exposure import RedactSecrets

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "server_args=%s", ({"api_key": "s3cret", "port": 1},), None)
    assert RedactSecrets(["s3cret", None]).filter(record) is True
    assert record.getMessage() == "server_args={'api_key': '***', 'port': 1}"
