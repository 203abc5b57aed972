"""The package imports with neither engine installed, and imports no engine code by itself."""

import subprocess
import sys

MODULES = [
    "engine_plugins",
    "engine_plugins.hookspecs",
    "engine_plugins.schema",
    "engine_plugins.config",
    "engine_plugins.control",
    "engine_plugins.http_api",
    "engine_plugins.assembly",
    "engine_plugins.stub.server",
]


def test_no_engine_module_is_imported():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES)
        + "bad = [m for m in sys.modules if m.split('.')[0] in ('sglang', 'vllm', 'torch')]\n"
        + "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
