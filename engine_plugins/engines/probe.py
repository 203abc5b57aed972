"""Checks that an engine has the names a plugin uses, in two ways that share one list.

Each engine's names module lists what it uses as :class:`EngineName` entries (a module, a dotted
name inside it, the parameters a function must take) and what tells its shims apart as
:class:`Feature` entries. :func:`check` reads them through a resolver:

- :class:`ImportResolver`: the installed engine, imported (the plugin at startup);
- :class:`SourceResolver`: an engine's source tree, parsed, nothing imported (the static probe
  of a wheel, for versions that cannot run here);
- :class:`ObjectResolver`: objects already in hand that stand for the engine's modules (what a
  facade imported, or a fake engine's stand-ins).

So the static probe, the running plugin and the fakes agree by construction. This module imports
no engine; :mod:`engine_plugins.engines.engine_manifest` applies :func:`check` to a manifest.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping, Optional, Protocol, Sequence


@dataclass(frozen=True)
class EngineName:
    """One name a plugin uses: ``module`` (dotted), ``name`` inside it (``Class.method``, a field,
    a function) and the parameters it must accept. ``on_self``: an attribute that the class's
    own code sets on ``self`` (an instance attribute), which only an instance shows at run time."""

    module: str
    name: str
    params: tuple[str, ...] = ()
    on_self: bool = False

    def __str__(self) -> str:
        sig = f"({', '.join(self.params)})" if self.params else ""
        return f"{self.module}.{self.name}{sig}"


@dataclass(frozen=True)
class Feature:
    """A difference between engine versions that a shim covers: *present* when the engine has
    ``probe``; the shim ``shim`` is active when it has not (or, with ``on_presence``, when it has)."""

    key: str
    probe: EngineName
    shim: str
    """What the plugin does instead, in words (the startup log's line)."""
    on_presence: bool = False
    """The shim answers something the engine has (a newer refusal, an older route), not a lack."""


@dataclass
class ProbeReport:
    """What :func:`check` found: the names missing and which features the engine has."""

    missing: list[str] = field(default_factory=list)
    features: dict[str, bool] = field(default_factory=dict)

    def active_shims(self, features: Sequence[Feature]) -> list[str]:
        """The shims in force: one per feature the engine lacks (or has, for ``on_presence`` ones)."""
        return [f.shim for f in features if self.features.get(f.key, False) == f.on_presence]


class Resolver(Protocol):
    """Finds a name in an engine; None when the module or the name is not there."""

    def params(self, name: EngineName) -> Optional[list[str]]:
        """The parameter names of *name* if it is a function, ``[]`` for any other object, None if absent."""


class ImportResolver:
    """Resolves names in the installed engine by importing its modules."""

    def params(self, name: EngineName) -> Optional[list[str]]:
        """See :class:`Resolver`."""
        try:
            obj: Any = importlib.import_module(name.module)
        except ImportError:
            return None
        return _params_in(obj, name)


class ObjectResolver:
    """Resolves names in objects that stand for the engine's modules: ``{module: object}``.

    A module object (the engine's own, or a fake's module) stands for the whole engine module;
    any other object (a namespace) only for the top-level names it holds, so a facade can offer
    just the classes it imported. :meth:`covers` says which names it can answer for.
    """

    def __init__(self, modules: Mapping[str, Any]) -> None:
        self.modules = dict(modules)

    def covers(self, name: EngineName) -> bool:
        """Whether *name* lies in what these objects stand for."""
        obj = self.modules.get(name.module)
        if obj is None:
            return False
        return isinstance(obj, ModuleType) or hasattr(obj, name.name.split(".")[0])

    def params(self, name: EngineName) -> Optional[list[str]]:
        """See :class:`Resolver`."""
        obj = self.modules.get(name.module)
        return None if obj is None else _params_in(obj, name)


def _params_in(obj: Any, name: EngineName) -> Optional[list[str]]:
    """*name*'s parameters (see :class:`Resolver`), looked up from *obj*, its module."""
    parts = name.name.split(".")
    if name.on_self:
        # Instance attributes are checked on the instance too; here the class must exist and, where
        # its source can be read, some method of it or of a base must assign the attribute (as the
        # static probe reads it), so that a feature can be probed on one.
        cls = _params_in(obj, EngineName(name.module, ".".join(parts[:-1])))
        if cls is None:
            return None
        return [] if _may_assign_on_self(_resolve(obj, parts[:-1]), parts[-1]) else None
    for part in parts:
        if part in getattr(obj, "__struct_fields__", ()) or part in getattr(obj, "__dataclass_fields__", {}):
            return []  # a struct or dataclass field without a class-level default
        if not hasattr(obj, part):
            return None
        obj = getattr(obj, part)
    if not callable(obj) or isinstance(obj, type):
        return []
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return []


class SourceResolver:
    """Resolves names in an engine's source tree (an unpacked wheel) by parsing, never importing."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._trees: dict[str, Optional[ast.Module]] = {}

    def _tree(self, module: str) -> Optional[ast.Module]:
        if module not in self._trees:
            base = self.root / module.replace(".", "/")
            path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            self._trees[module] = ast.parse(path.read_text()) if path.exists() else None
        return self._trees[module]

    def params(self, name: EngineName) -> Optional[list[str]]:
        """See :class:`Resolver`."""
        tree = self._tree(name.module)
        if tree is None:
            return None
        scope: list[ast.stmt] = tree.body
        parts = name.name.split(".")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if last and name.on_self:
                return [] if _assigns_on_self(scope, part) else None
            node = _find(tree, scope, part)
            if node is None:
                return None
            if isinstance(node, ast.ClassDef):
                scope = self._class_body(name.module, tree, node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not last:
                    return None
                args = node.args
                return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)] + (
                    [args.vararg.arg] if args.vararg else []) + ([args.kwarg.arg] if args.kwarg else [])
            elif not last:
                return None
        return []


    def _class_body(self, module: str, tree: ast.Module, cls: ast.ClassDef, depth: int = 0) -> list[ast.stmt]:
        """A class's body followed by its bases' (inherited names), in this module or imported
        into it with ``from ... import``."""
        body = list(cls.body)
        for base in cls.bases:
            if not isinstance(base, ast.Name) or depth > 8:
                continue
            found = _find(tree, tree.body, base.id)
            if isinstance(found, ast.ClassDef) and found is not cls:
                body += self._class_body(module, tree, found, depth + 1)
            elif isinstance(found, ast.ImportFrom):
                source = _absolute(module, found)
                other = self._tree(source)
                parent = _find(other, other.body, base.id) if other is not None else None
                if isinstance(parent, ast.ClassDef):
                    body += self._class_body(source, other, parent, depth + 1)
        return body


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` in *module* names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = module.split(".")[: -node.level]
    return ".".join(package + ([node.module] if node.module else []))


def _find(tree: ast.Module, scope: list[ast.stmt], name: str) -> Optional[ast.AST]:
    """The definition of *name* in *scope*: a class, a function, an assignment or an import."""
    for node in scope:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name.split(".")[0]) == name for a in node.names):
            return node
    return None




def _resolve(obj: Any, parts: list[str]) -> Any:
    """``obj.<parts...>``."""
    for part in parts:
        obj = getattr(obj, part)
    return obj


def _may_assign_on_self(cls: Any, attr: str) -> bool:
    """Whether instances of *cls* may have *attr*: a class attribute or field, an assignment of
    ``self.<attr>`` in the source of *cls* or a base, or a class whose source cannot be read."""
    if not isinstance(cls, type) or hasattr(cls, attr) or attr in getattr(cls, "__dataclass_fields__", {}):
        return True
    for klass in cls.__mro__:
        if klass is object:
            continue
        assigned = _assigned_on_self(klass)
        if assigned is None:
            return True  # no source to read (a compiled class): the instance check decides
        if attr in assigned:
            return True
    return False


@functools.lru_cache(maxsize=None)
def _assigned_on_self(klass: type) -> Optional[frozenset[str]]:
    """Every ``self.<name>`` a method of *klass* (its own source) assigns, parsed once per class;
    None where its source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))  # a class nested in a function is indented
    except (OSError, TypeError, SyntaxError):
        return None
    return _self_assignments(tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else tree.body)


def _self_assignments(scope: list[ast.stmt]) -> frozenset[str]:
    """Every ``self.<name>`` some method in *scope* assigns."""
    names: set[str] = set()
    for node in scope:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(sub, ast.AnnAssign) else []
                for t in targets:
                    names.update(n.attr for n in ast.walk(t)
                                 if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self")
    return frozenset(names)


def _assigns_on_self(scope: list[ast.stmt], attr: str) -> bool:
    """Whether some method in *scope* assigns ``self.<attr>``."""
    return attr in _self_assignments(scope)


def check(resolver: Resolver, required: Sequence[EngineName], features: Sequence[Feature]) -> ProbeReport:
    """Every required name (missing ones listed, with the parameters a function lacks) and every feature."""
    report = ProbeReport()
    for name in required:
        params = resolver.params(name)
        if params is None:
            report.missing.append(str(name))
        elif name.params and not set(name.params) <= set(params) and not _takes_any_keyword(params):
            lacking = [p for p in name.params if p not in params]
            report.missing.append(f"{name} (no parameter {', '.join(lacking)})")
    for feature in features:
        params = resolver.params(feature.probe)
        report.features[feature.key] = params is not None and set(feature.probe.params) <= set(params)
    return report


def _takes_any_keyword(params: list[str]) -> bool:
    # A signature of (*args, **kwargs) (a wrapper) hides the real parameters: accept it.
    return "kwargs" in params and "args" in params
