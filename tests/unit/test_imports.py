"""The package imports with neither engine installed, and imports no engine code by itself; nor
prometheus_client, which SGLang needs imported only after it has set PROMETHEUS_MULTIPROC_DIR."""

import subprocess
import sys

MODULES = [
    "engine_plugins",
    "engine_plugins.contract.hookspecs",
    "engine_plugins.contract.schema",
    "engine_plugins.host.config",
    "engine_plugins.core.control",
    "engine_plugins.host.http_api",
    "engine_plugins.host.assembly",
    "engine_plugins.host.dispatch",
    "engine_plugins.host.default_hooks",
    "engine_plugins.metrics.plugin",
    "engine_plugins.engines.stub.server",
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
        "from engine_plugins.host.assembly import assemble\n"
        "from engine_plugins.host.config import Settings\n"
        "stack = assemble(lambda: None, settings=Settings())\n"
        "assert stack.pm.get_plugin('metrics') is not None\n"
        "assert 'prometheus_client' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_ray_pieces_import_without_ray():
    # Ray is the extra `ray`: the client's transport imports it only when it reads Ray's
    # exceptions, and the actor side needs none (Ray only calls it).
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # as if not installed: importing it raises ImportError\n"
        "import engine_plugins.client, engine_plugins.client.ray_transport, engine_plugins.inprocess\n"
        "from engine_plugins.inprocess import ContractActor, with_contract\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
