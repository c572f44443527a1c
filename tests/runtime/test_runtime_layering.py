"""``stargraph.runtime`` is layered: its import graph has no cycle.

Data and plan modules sit at the bottom, the step loop in the middle, the ``CompiledGraph``
facade on top; a module that needs something from above takes it as a parameter instead of
importing it. The graph is read from the source (every ``import``, including the lazy ones
inside functions and those under ``TYPE_CHECKING``), so a cycle hidden from the interpreter
is still one here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stargraph.runtime

RUNTIME = Path(stargraph.runtime.__file__).parent
PACKAGE = "stargraph.runtime"


def _module_name(path: Path) -> str:
    return PACKAGE if path.name == "__init__.py" else f"{PACKAGE}.{path.stem}"


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """What one import statement names: the module and, for ``from m import x``, ``m.x``
    (which is a module when ``x`` is a submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """``{module: modules of the same package it imports}`` for module sources by name."""
    graph: dict[str, set[str]] = {name: set() for name in sources}
    for name, text in sources.items():
        package = name if name == PACKAGE else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for named in _targets(node, package):
                # "stargraph.runtime._plan.Task" -> the module that defines it.
                target = named
                while target and target not in sources:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end),
    or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)) is not None:
            return cycle
    return None


def runtime_sources() -> dict[str, str]:
    return {_module_name(p): p.read_text() for p in sorted(RUNTIME.glob("*.py"))}


def test_the_runtime_package_has_no_import_cycle() -> None:
    graph = import_graph(runtime_sources())
    assert len(graph) > 15, sorted(graph)  # the whole package was read
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_a_cycle_through_a_lazy_or_type_checking_import_is_found() -> None:
    """The check itself: an upward import hidden in a function or under TYPE_CHECKING
    (as the stores' bridge once imported the executor) is a cycle."""
    sources = runtime_sources()
    sources[f"{PACKAGE}._plan"] += (
        "\nif TYPE_CHECKING:\n    from stargraph.runtime._executor import CompiledGraph\n"
    )
    cycle = find_cycle(import_graph(sources))
    assert cycle is not None
    assert cycle[0] == cycle[-1], cycle
    assert f"{PACKAGE}._plan" in cycle, cycle
    assert f"{PACKAGE}._executor" in cycle, cycle

    lazy = runtime_sources()
    lazy[f"{PACKAGE}._values"] += "\n\ndef late():\n    import stargraph.runtime._steploop\n"
    cycle = find_cycle(import_graph(lazy))
    assert cycle is not None
    assert f"{PACKAGE}._steploop" in cycle, cycle


def test_the_facade_is_imported_by_no_other_runtime_module() -> None:
    """Only the package itself re-exports ``CompiledGraph``: every other module sits below
    the facade and takes what it needs (a plan, the step loop) as a parameter."""
    graph = import_graph(runtime_sources())
    importers = sorted(m for m, targets in graph.items() if f"{PACKAGE}._executor" in targets)
    assert importers == [PACKAGE]
