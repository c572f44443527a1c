"""A neutral picture of a graph IR: boxes, links and clusters, built once for every format.

Mermaid and DOT differ only in syntax; what is drawn (START/END, join markers, conditional
labels, rule-routed gotos, subgraph clusters) is decided here, so both formats agree. All
collections are sorted, so a picture is a pure function of the IR.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from stargraph.ir import (
    END,
    START,
    ConditionalEdgeIR,
    GraphIR,
    RulePackIR,
    StaticEdgeIR,
    SubgraphNodeIR,
)
from stargraph.ir._models import ended_implicitly

__all__ = ["Box", "BoxKind", "Cluster", "Link", "LinkStyle", "Picture", "picture_of"]

BoxKind = Literal["start", "end", "node", "join", "legend", "missing"]
"""What a box stands for; formats pick a shape per kind."""

LinkStyle = Literal["solid", "conditional", "rule"]
"""Static edge, conditional (router) edge, or a ``goto`` a rule pack may take."""

_SEP: Final = "/"


@dataclass(frozen=True, slots=True)
class Box:
    """One drawn node. ``key`` is a unique path (``step-3/t0``); ``lines`` its label lines."""

    key: str
    kind: BoxKind
    lines: tuple[str, ...]
    ruled: bool = False


@dataclass(frozen=True, slots=True)
class Link:
    """One drawn edge between two box keys."""

    source: str
    target: str
    style: LinkStyle
    label: str = ""


@dataclass(slots=True)
class Cluster:
    """A graph level: the root graph or the child graph of a subgraph node."""

    key: str
    title: str
    boxes: list[Box] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Picture:
    """A whole picture: the root cluster, every link, and a safe id for every box key."""

    name: str
    root: Cluster
    links: tuple[Link, ...]
    ids: dict[str, str]


def picture_of(ir: GraphIR) -> Picture:
    """Build the picture of ``ir`` (child graphs come from ``ir.subgraphs``, recursively)."""
    links: list[Link] = []
    root = Cluster(key="", title=ir.name)
    _level(ir, "", root, links, {**ir.subgraphs})
    keys = sorted(_all_keys(root))
    unique = sorted(set(links), key=lambda k: (k.source, k.target, k.style, k.label))
    return Picture(name=ir.name, root=root, links=tuple(unique), ids=_safe_ids(keys))


def _key(prefix: str, name: str) -> str:
    return f"{prefix}{_SEP}{name}" if prefix else name


def _level(
    ir: GraphIR,
    prefix: str,
    cluster: Cluster,
    links: list[Link],
    known: dict[str, GraphIR],
) -> None:
    """Draw one graph level into ``cluster``; ``known`` holds every child IR seen so far."""
    known = {**known, **ir.subgraphs}
    start, end = _key(prefix, START), _key(prefix, END)
    top = not prefix
    cluster.boxes.append(Box(start, "start", ("START" if top else "start",)))
    cluster.boxes.append(Box(end, "end", ("END" if top else "end",)))
    # Where an edge into / out of a node lands: a subgraph node is entered at its child's
    # start marker and left from its child's end marker, so clusters read as one node.
    entry_of: dict[str, str] = {START: start, END: end}
    exit_of: dict[str, str] = {START: start, END: end}
    for node in ir.nodes:
        key = _key(prefix, node.id)
        entry_of[node.id] = exit_of[node.id] = key
        marks = _marks(node.rules, node.interrupt_before, node.interrupt_after)
        if isinstance(node, SubgraphNodeIR):
            child = known.get(node.graph)
            if child is None:
                lines = (node.id, f"missing subgraph {node.graph[:19]}")
                cluster.boxes.append(Box(key, "missing", lines, ruled=bool(node.rules)))
                continue
            title = f"{node.id}: {node.skill}" if node.skill else f"{node.id}: {child.name}"
            inner = Cluster(key=key, title=" ".join([title, *marks]))
            _level(child, key, inner, links, known)
            cluster.clusters.append(inner)
            entry_of[node.id] = _key(key, START)
            exit_of[node.id] = _key(key, END)
        else:
            marks = (*marks, *_function_marks(node))
            cluster.boxes.append(Box(key, "node", (node.id, *marks), ruled=bool(node.rules)))

    def src(name: str) -> str:
        return exit_of.get(name, _key(prefix, name))

    def dst(name: str) -> str:
        return entry_of.get(name, _key(prefix, name))

    for target in ir.entry:
        links.append(Link(start, dst(target), "solid"))
    for index, edge in enumerate(ir.edges):
        if isinstance(edge, StaticEdgeIR):
            if len(edge.sources) == 1:
                links.append(Link(src(edge.sources[0]), dst(edge.target), "solid"))
                continue
            # A join: the target runs once, after every source; one marker says so.
            marker = _key(prefix, f"__join{index}__")
            cluster.boxes.append(Box(marker, "join", ("all",)))
            links.extend(Link(src(s), marker, "solid") for s in edge.sources)
            links.append(Link(marker, dst(edge.target), "solid"))
        elif isinstance(edge, ConditionalEdgeIR):
            by_target: dict[str, list[str]] = defaultdict(list)
            for result, target in edge.mapping.items():
                by_target[target].append(result)
            for target, results in sorted(by_target.items()):
                label = " | ".join(sorted(results))
                links.append(Link(src(edge.source), dst(target), "conditional", label))
    for node in ir.nodes:
        # Where a Command the node returns may go.
        links.extend(
            Link(src(node.id), dst(t), "conditional", "command") for t in node.destinations
        )
    # A node with no way out ends the run: drawn as the edge to END it implies.
    links.extend(Link(src(n), end, "solid") for n in ended_implicitly(ir))
    if ir.rule_packs:
        legend = _key(prefix, "__rules__")
        listed = ("rule packs", *(f"{p.id}@{p.version}" for p in ir.rule_packs))
        cluster.boxes.append(Box(legend, "legend", listed))
    mounted: list[tuple[str | None, tuple[RulePackIR, ...]]] = [(None, ir.rule_packs)]
    mounted += [(str(n.id), n.rules) for n in ir.nodes]
    for pack_node, packs in mounted:
        for pack in packs:
            for matched, rule, target in _gotos(pack):
                sources = matched
                if pack_node is not None:
                    # A node's pack only decides after that node ran.
                    sources = frozenset({pack_node}) if matched is None else matched
                    sources = sources & {pack_node}
                label = f"rule {rule}"
                if sources is None:
                    links.append(Link(_key(prefix, "__rules__"), dst(target), "rule", label))
                else:
                    links.extend(Link(src(s), dst(target), "rule", label) for s in sources)
    cluster.boxes.sort(key=lambda b: b.key)
    cluster.clusters.sort(key=lambda c: c.key)


def _function_marks(node: Any) -> tuple[str, ...]:
    """A function node's closure factory and cache policy, as drawn under its id."""
    marks: list[str] = []
    closure = getattr(node, "closure", None)
    if closure is not None:
        if closure.factory is not None:
            args = ", ".join(f"{k}={v!r}" for k, v in sorted(closure.args.items()))
            marks.append(f"closure: {closure.factory.rpartition(':')[2]}({args})")
        else:
            marks.append("closure")
    cache = getattr(node, "cache", None)
    if cache is not None:
        marks.append("cached" + (f" {cache.ttl_s:g}s" if cache.ttl_s is not None else ""))
    return tuple(f"[{m}]" for m in marks)


def _marks(packs: tuple[RulePackIR, ...], before: bool, after: bool) -> tuple[str, ...]:
    marks: list[str] = []
    if packs:
        marks.append("rules: " + ", ".join(f"{p.id}@{p.version}" for p in packs))
    if before:
        marks.append("interrupt before")
    if after:
        marks.append("interrupt after")
    return tuple(f"[{m}]" for m in marks)


def _gotos(pack: RulePackIR) -> list[tuple[frozenset[str] | None, str, str]]:
    """``(nodes the rule fires at or None for any, rule name, literal goto target)``.

    Only literal targets can be drawn; a computed target is decided at run time. The pack
    text is read with fathom's CLIPS reader (the same one the compiler's checks use); a pack
    it cannot read is simply not drawn here - ``stargraph compile`` reports it.
    """
    from stargraph.fathom import _sexpr as sx  # no public reader yet; see the CLI report

    out: list[tuple[frozenset[str] | None, str, str]] = []
    try:
        constructs = sx.read_constructs(pack.source)
    except sx.SourceError:
        return out
    for construct in constructs:
        if construct.kind != "defrule":
            continue
        lhs, rhs = sx.split_rule(construct.tree)
        nodes = sx.static_nodes(lhs)
        for site in sx.decision_sites(rhs):
            if site.kind == "goto" and site.target is not None:
                out.append((nodes, construct.name, site.target))
    return sorted(out, key=lambda g: (sorted(g[0] or ()), g[1], g[2]))


def _all_keys(cluster: Cluster) -> list[str]:
    keys = [b.key for b in cluster.boxes]
    for child in cluster.clusters:
        keys.append(child.key)
        keys.extend(_all_keys(child))
    return keys


# Words Mermaid reads as syntax when used as a node id.
_RESERVED: Final = frozenset(
    {"end", "graph", "flowchart", "subgraph", "style", "class", "classdef", "click",
     "linkstyle", "direction", "default"}
)  # fmt: skip


def _safe_ids(keys: list[str]) -> dict[str, str]:
    """Identifier-safe, unique ids for box keys (``step-3/t0`` -> ``step_3__t0``)."""
    ids: dict[str, str] = {}
    taken: set[str] = set()
    for key in keys:
        parts = key.split(_SEP)
        # Markers inside a cluster (``__start__``, ``__join0__``) lose their underscores:
        # the cluster's own id already sets them apart from user nodes.
        parts = [parts[0], *(p.strip("_") or p for p in parts[1:])]
        base = "__".join(re.sub(r"[^A-Za-z0-9_]", "_", part) for part in parts)
        if not base or (not base[0].isalpha() and not base.startswith("__")):
            base = f"n_{base}"
        if base.lower() in _RESERVED:
            base = f"n_{base}"
        candidate, n = base, 2
        while candidate in taken:
            candidate, n = f"{base}_{n}", n + 1
        taken.add(candidate)
        ids[key] = candidate
    return ids
