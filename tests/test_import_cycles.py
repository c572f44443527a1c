"""Import cycles, computed from the source: every import counts (module level, lazy inside a
function, or under ``TYPE_CHECKING``), because each back-edge says two modules are one room.

``from package import name`` is an edge to ``package.name`` when that is a module, else to
``package``; the implicit import of a module's own parent packages is not an edge (every
submodule would otherwise be in a cycle with its package's ``__init__``).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import stargraph

_ROOT = Path(stargraph.__file__).parent


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*package, *([node.module] if node.module else [])])
            subs = [f"{base}.{alias.name}" for alias in node.names]
            inside = [s for s in subs if s in modules]
            targets.update(inside if len(inside) == len(subs) else [base, *inside])
    return {t for t in targets if t in modules and t != module}


def import_cycles(root: Path = _ROOT) -> list[list[str]]:
    """The strongly connected components of more than one module of the package at
    ``root``, each sorted."""
    modules = _modules(root)
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(start: str) -> None:
        # Tarjan's algorithm, iterative (the package is deep enough to matter for recursion).
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for name in sorted(edges):
        if name not in index:
            visit(name)
    return cycles


@functools.cache
def _stargraph_cycles() -> tuple[tuple[str, ...], ...]:
    # Parsing the whole package takes about a second: once for all the cases below.
    return tuple(tuple(cycle) for cycle in import_cycles())


@pytest.mark.parametrize(
    "module",
    [
        # tools._tool imported tools._host (for ToolHost) and _host imported _tool back.
        "stargraph.tools._host",
        "stargraph.tools._tool",
        # plugin._registry imported get_plugin_manager back from the package __init__.
        "stargraph.plugin",
        "stargraph.plugin._registry",
    ],
)
def test_issue23_module_is_in_no_import_cycle(module: str) -> None:
    cycles = [cycle for cycle in _stargraph_cycles() if module in cycle]
    assert cycles == [], f"{module} is in an import cycle: {cycles}"


def test_import_cycles_counts_lazy_and_type_only_imports(tmp_path: Path) -> None:
    # The detector itself, on a package whose cycles go through a lazy import and a
    # TYPE_CHECKING import; a submodule importing its own package's sibling is no cycle.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.a import x\n")
    (package / "a.py").write_text("from pkg import b\nx = 1\n")
    (package / "b.py").write_text("def f():\n    from .a import x\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import y\n"
    )
    (package / "d.py").write_text("import pkg.c\ny = 2\n")
    assert import_cycles(package) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
