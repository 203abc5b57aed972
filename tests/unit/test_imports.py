"""The package imports with neither engine installed, and imports no engine code by itself; nor
prometheus_client, which SGLang needs imported only after it has set PROMETHEUS_MULTIPROC_DIR."""

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
    "engine_plugins.dispatch",
    "engine_plugins.default_hooks",
    "engine_plugins.metrics.plugin",
    "engine_plugins.stub.server",
]


def test_no_engine_module_is_imported():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES)
        + "bad = [m for m in sys.modules if m.split('.')[0] in ('sglang', 'vllm', 'torch', 'prometheus_client')]\n"
        + "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_loading_the_plugins_does_not_import_prometheus_client():
    # What SGLang's load_plugins() does, before PROMETHEUS_MULTIPROC_DIR is set.
    code = (
        "import sys\n"
        "from engine_plugins.assembly import assemble\n"
        "from engine_plugins.config import Settings\n"
        "stack = assemble(lambda: None, settings=Settings())\n"
        "assert stack.pm.get_plugin('metrics') is not None\n"
        "assert 'prometheus_client' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
