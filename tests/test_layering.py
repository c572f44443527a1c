"""No import circle anywhere in ``src/stargraph``, type-only and lazy imports included.

The import graph is computed from the syntax trees, so nothing is imported. Its nodes are the
modules of the package (``stargraph/cli/_app.py`` is ``stargraph.cli._app``, a package's
``__init__.py`` is the package). Every import statement counts wherever it stands: at the top,
inside a function (a lazy import), or under ``if TYPE_CHECKING:`` (a type-only one). A
statement gives these edges:

* ``import a.b.c`` (with or without ``as``): to ``a.b.c``;
* ``from p import n`` (``p`` absolute, or relative and resolved against the importing
  module's package): to ``p.n`` when ``p.n`` is a module, else to ``p`` (``n`` is then a
  name defined in ``p``); ``from p import *`` goes to ``p``;
* a target that is not a module of the package (``import stargraph.x.attr`` never is) goes to
  its nearest enclosing module; targets outside ``stargraph`` are ignored, and so is an edge
  from a module to itself.

Not counted: the parent packages Python runs before a submodule (``import a.b.c`` first runs
``a/__init__`` and ``a/b/__init__``). Counting them would put every package that re-exports
one of its submodules in a circle with it; what this test guards is that no module refers,
however indirectly, back to itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "stargraph"


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line`` of its file."""

    source: str
    target: str
    line: int


def modules(src: Path = SRC, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` under ``src``, by dotted name."""
    found = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _nearest(target: str, known: dict[str, Path]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[Edge]:
    """The edges of ``module`` (at ``path``), by the rules in this file's docstring."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if alias.name != "*" and sub in known else base)
        for target in targets:
            if target != PACKAGE and not target.startswith(f"{PACKAGE}."):
                continue
            found = _nearest(target, known)
            if found is not None and found != module:
                yield Edge(module, found, node.lineno)


def import_graph(src: Path = SRC, package: str = PACKAGE) -> nx.DiGraph[str]:
    """The import graph of ``package``; each edge keeps the lines that make it (``lines``)."""
    known = modules(src, package)
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(known)
    for module, path in known.items():
        for edge in imports(module, path, known):
            if graph.has_edge(edge.source, edge.target):
                graph.edges[edge.source, edge.target]["lines"].append(edge.line)
            else:
                graph.add_edge(edge.source, edge.target, lines=[edge.line])
    return graph


def circles(graph: nx.DiGraph[str]) -> list[str]:
    """One line per import circle (a strongly connected set of modules): its modules, and one
    closed path through them with the line of each import, ``a:12 -> b:3 -> a``."""
    out = []
    for component in nx.strongly_connected_components(graph):
        if len(component) < 2:
            continue
        cycle = nx.find_cycle(graph.subgraph(component))
        path = " -> ".join(f"{a}:{graph.edges[a, b]['lines'][0]}" for a, b in cycle)
        out.append(f"{len(component)} modules {sorted(component)}; e.g. {path} -> {cycle[0][0]}")
    return sorted(out)


def test_no_import_circle_in_stargraph() -> None:
    found = circles(import_graph())
    assert found == [], "import circles (break each so imports point one way):\n" + "\n".join(found)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "stargraph" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_graph_counts_lazy_type_only_and_relative_imports(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "__init__.py": "from stargraph.a import A\n",
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
            "b.py": "def f():\n    from stargraph import c\n",
            "c.py": "import stargraph.a as a\nfrom stargraph import thing\nfrom os import path\n",
        },
    )
    graph = import_graph(src)
    assert sorted(graph.edges) == [
        ("stargraph", "stargraph.a"),
        ("stargraph.a", "stargraph.b"),  # type-only, relative
        ("stargraph.b", "stargraph.c"),  # lazy; `c` is a module, so the edge goes to it
        ("stargraph.c", "stargraph"),  # `thing` is no module: the edge goes to the package
        ("stargraph.c", "stargraph.a"),
    ]
    (circle,) = circles(graph)
    assert circle.startswith(
        "4 modules ['stargraph', 'stargraph.a', 'stargraph.b', 'stargraph.c']; e.g. "
    )


def test_a_package_and_the_submodules_it_reexports_are_no_circle(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "__init__.py": "from stargraph.pkg import x\n",
            "pkg/__init__.py": "from stargraph.pkg._impl import x\n",
            "pkg/_impl.py": "from stargraph.pkg import _other\nx = 1\n",
            "pkg/_other.py": "",
        },
    )
    assert circles(import_graph(src)) == []
