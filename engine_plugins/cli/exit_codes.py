"""The CLI's exit codes (docs/client.md documents them)."""

OK = 0
"""Every server succeeded (doctor: no problem found; demo: it ran to the end)."""
FAILED = 1
"""At least one server failed: unreachable, refused the key, 404, 5xx, unsupported; or the demo failed."""
USAGE = 2
"""Bad arguments, or a bad ENGINE_PLUGINS_* variable."""
TIMEOUT = 3
"""Some server did not answer, or was not idle, by the deadline (and none failed otherwise)."""
PROBLEMS = 4
"""doctor found problems (each printed with its fix)."""


def for_fleet(result) -> int:
    """OK, TIMEOUT when the only failures are time-outs, else FAILED."""
    if result.ok:
        return OK
    if all(r.kind == "timeout" for r in result.failed):
        return TIMEOUT
    return FAILED
