"""The import rules between the package's layers, read from the source (nothing is imported).

The contract builds on nothing; the core on the contract only; the client speaks the contract and
nothing else of the package; no shipped module reaches the harness (tools/) or the tests; each
engine is imported only inside its own adapter.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "engine_plugins"

# Which of the package's layers each layer may import (besides itself).
ALLOWED = {
    "contract": set(),
    "core": {"contract"},
    "client": {"contract"},
    "host": {"contract", "core"},
    "fanout": {"contract", "core"},
    "metrics": {"contract", "core", "host"},
    "engines": {"contract", "core", "host", "fanout"},
    "inprocess": {"contract", "core", "host"},  # attach.py names the engines' adapters, imported by name
    "cli": {"contract", "client", "host", "engines"},  # doctor reads the settings and the plugins
}
# Third-party packages only one place may import: each engine inside its adapter.
ENGINE_PACKAGES = {"sglang": "engines/sglang", "vllm": "engines/vllm", "torch": "engines/"}
NOT_SHIPPED = {"tools", "tests", "benchmarks", "examples", "scripts"}


def _imports(path: Path) -> list[str]:
    """Every module *path* imports, relative imports resolved."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append(module)
            # ``from engine_plugins import x`` imports the module engine_plugins.x when there is one.
            found += [f"{module}.{a.name}" for a in node.names if (PACKAGE.parent / module.replace(".", "/") / a.name).exists()]
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else ""


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_imports_only_what_its_layer_may(path):
    layer = _layer(path)
    broken = []
    for module in _imports(path):
        top, _, rest = module.partition(".")
        if top in NOT_SHIPPED:
            broken.append(f"{module} (not shipped)")
        where = str(path.relative_to(PACKAGE))
        if top in ENGINE_PACKAGES and not where.startswith(ENGINE_PACKAGES[top]):
            broken.append(f"{module} (an engine, outside its adapter)")
        if top == "engine_plugins" and rest and layer in ALLOWED:
            target = rest.split(".")[0]
            if (PACKAGE / target).is_dir() and target != layer and target not in ALLOWED[layer]:
                broken.append(f"{module} ({layer}/ may import {sorted(ALLOWED[layer]) or 'nothing'} of the package)")
    assert broken == [], f"{path.relative_to(PACKAGE)} imports {broken}"


def test_every_layer_has_a_rule():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(ALLOWED), folders ^ set(ALLOWED)
