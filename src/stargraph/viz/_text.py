"""Mermaid and Graphviz DOT text for a graph IR (no web service, no graphviz needed)."""

from __future__ import annotations

from typing import Final

from stargraph.ir import GraphIR
from stargraph.viz._model import Box, Cluster, Picture, picture_of

__all__ = ["to_dot", "to_mermaid"]

_INDENT: Final = "    "


# --------------------------------------------------------------------------- mermaid

_MERMAID_SHAPES: Final = {
    "start": ('(["', '"])'),
    "end": ('(["', '"])'),
    "node": ('["', '"]'),
    "join": ('(("', '"))'),
    "legend": ('[/"', '"/]'),
    "missing": ('["', '"]'),
}

_MERMAID_ARROWS: Final = {"solid": "-->", "conditional": "-.->", "rule": "==>"}


def _mermaid_text(text: str) -> str:
    # Mermaid reads HTML entities in quoted labels; these characters would otherwise end the
    # label or be taken as markup.
    return (
        text.replace("&", "#amp;")
        .replace('"', "#quot;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
        .replace("|", "#124;")
        .replace("\n", " ")
    )


def to_mermaid(ir: GraphIR) -> str:
    """A Mermaid ``flowchart`` of ``ir``.

    START/END as stadiums, joins as an ``all`` circle, conditional edges dashed and labelled
    with their router results, rule-pack ``goto`` edges thick and labelled ``rule <name>``,
    subgraph nodes as nested ``subgraph`` blocks holding the child graph, and a legend box
    listing the graph's rule packs. Output is sorted, so equal IRs give equal text.
    """
    pic = picture_of(ir)
    lines = ["flowchart TD", f"{_INDENT}%% {_mermaid_text(ir.name)} {ir.graph_hash}"]
    lines += _mermaid_cluster(pic, pic.root, 1)
    for link in pic.links:
        arrow = _MERMAID_ARROWS[link.style]
        label = f'|"{_mermaid_text(link.label)}"|' if link.label else ""
        lines.append(f"{_INDENT}{pic.ids[link.source]} {arrow}{label} {pic.ids[link.target]}")
    ruled = sorted(pic.ids[b.key] for b in _boxes(pic.root) if b.ruled)
    legends = sorted(pic.ids[b.key] for b in _boxes(pic.root) if b.kind == "legend")
    joins = sorted(pic.ids[b.key] for b in _boxes(pic.root) if b.kind == "join")
    styles = [
        ("ruled", ruled, "stroke:#b8860b,stroke-width:3px"),
        ("legend", legends, "fill:#fff8dc,stroke:#b8860b"),
        ("joinmark", joins, "fill:#eeeeee,stroke:#666666"),
    ]
    for name, ids, css in styles:
        if ids:
            lines.append(f"{_INDENT}classDef {name} {css}")
            lines.append(f"{_INDENT}class {','.join(ids)} {name}")
    return "\n".join(lines) + "\n"


def _mermaid_cluster(pic: Picture, cluster: Cluster, depth: int) -> list[str]:
    pad = _INDENT * depth
    out: list[str] = []
    for box in cluster.boxes:
        left, right = _MERMAID_SHAPES[box.kind]
        label = "<br/>".join(_mermaid_text(line) for line in box.lines)
        out.append(f"{pad}{pic.ids[box.key]}{left}{label}{right}")
    for child in cluster.clusters:
        out.append(f'{pad}subgraph {pic.ids[child.key]} ["{_mermaid_text(child.title)}"]')
        out.append(f"{pad}{_INDENT}direction TB")
        out += _mermaid_cluster(pic, child, depth + 1)
        out.append(f"{pad}end")
    return out


def _boxes(cluster: Cluster) -> list[Box]:
    out = list(cluster.boxes)
    for child in cluster.clusters:
        out += _boxes(child)
    return out


# --------------------------------------------------------------------------- dot

_DOT_SHAPES: Final = {
    "start": 'shape=oval, style=filled, fillcolor="#eeeeee"',
    "end": 'shape=oval, style=filled, fillcolor="#eeeeee"',
    "node": "shape=box, style=rounded",
    "join": 'shape=circle, style=filled, fillcolor="#eeeeee", fontsize=10',
    "legend": 'shape=note, style=filled, fillcolor="#fff8dc"',
    "missing": 'shape=box, style="rounded,dashed", color="#cc0000"',
}

_DOT_EDGES: Final = {
    "solid": "",
    "conditional": "style=dashed",
    "rule": 'style=bold, color="#b8860b", fontcolor="#b8860b"',
}


def _dot_text(text: str) -> str:
    """A DOT double-quoted string body (backslashes, quotes and newlines escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_dot(ir: GraphIR) -> str:
    """A Graphviz DOT ``digraph`` of ``ir`` (same content as :func:`to_mermaid`).

    Subgraph nodes become ``cluster_*`` subgraphs holding the child graph; rule-ruled nodes
    get a thick gold border; conditional edges are dashed and labelled; rule ``goto`` edges
    are bold gold. Render it with :func:`stargraph.viz.render` or ``dot -Tsvg``.
    """
    pic = picture_of(ir)
    lines = [
        f'digraph "{_dot_text(ir.name)}" {{',
        f'{_INDENT}graph [rankdir=TB, compound=true, fontname="Helvetica", '
        f'tooltip="{_dot_text(ir.graph_hash)}"];',
        f'{_INDENT}node [fontname="Helvetica"];',
        f'{_INDENT}edge [fontname="Helvetica", fontsize=10];',
    ]
    lines += _dot_cluster(pic, pic.root, 1)
    for link in pic.links:
        attrs = [a for a in (_DOT_EDGES[link.style],) if a]
        if link.label:
            attrs.insert(0, f'label="{_dot_text(link.label)}"')
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f'{_INDENT}"{pic.ids[link.source]}" -> "{pic.ids[link.target]}"{suffix};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_cluster(pic: Picture, cluster: Cluster, depth: int) -> list[str]:
    pad = _INDENT * depth
    out: list[str] = []
    for box in cluster.boxes:
        label = _dot_text("\n".join(box.lines))
        extra = ', color="#b8860b", penwidth=3' if box.ruled else ""
        out.append(f'{pad}"{pic.ids[box.key]}" [label="{label}", {_DOT_SHAPES[box.kind]}{extra}];')
    for child in cluster.clusters:
        out.append(f'{pad}subgraph "cluster_{pic.ids[child.key]}" {{')
        out.append(f'{pad}{_INDENT}label="{_dot_text(child.title)}";')
        out.append(f"{pad}{_INDENT}style=rounded;")
        out += _dot_cluster(pic, child, depth + 1)
        out.append(f"{pad}}}")
    return out
