"""The graph of a run as inline SVG: the path that ran highlighted, node durations shown.

The boxes and links come from the same neutral picture as the static report and the
Mermaid/DOT text (:func:`stargraph.viz._model.picture_of`), so every format draws the same
graph; only the layout is done here (layers by longest path from START, back edges drawn as
arcs), because the console must not depend on Graphviz being installed.
"""

from __future__ import annotations

from collections import defaultdict
from html import escape
from typing import Final

from stargraph.ir import END, START, GraphIR
from stargraph.ui._digest import RunDigest
from stargraph.viz._model import Box, Cluster, picture_of

__all__ = ["graph_svg"]

_W: Final = 156
_H: Final = 42
_GAP_X: Final = 24
_GAP_Y: Final = 34


def _boxes(cluster: Cluster) -> list[Box]:
    out = [b for b in cluster.boxes if b.kind != "legend"]
    for child in cluster.clusters:
        out.extend(_boxes(child))
    return out


def _clusters(cluster: Cluster) -> list[tuple[Cluster, list[Box]]]:
    """Every child graph below ``cluster`` (nested ones too) with all the boxes inside it."""
    out = []
    for child in cluster.clusters:
        out.append((child, _boxes(child)))
        out.extend(_clusters(child))
    return out


def _frame(title: str, key: str, corners: list[tuple[float, float]], depth: int) -> str:
    """A labelled frame around the boxes at ``corners`` (their top-left points): a skill
    run as a subgraph reads as one unit, named by its skill."""
    pad = 8.0 - 3 * min(depth, 2)
    left = min(x for x, _ in corners) - pad
    top = min(y for _, y in corners) - pad - 12
    right = max(x for x, _ in corners) + _W + pad
    bottom = max(y for _, y in corners) + _H + pad
    return (
        f'<g class="cluster" data-cluster="{escape(key)}"><title>{escape(title)}</title>'
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" rx="8"/>'
        f'<text class="cluster-label" x="{left + 6}" y="{top + 12}">{escape(title[:60])}</text>'
        "</g>"
    )


def _root(key: str) -> str:
    return key.split("/", 1)[0]


def _layers(keys: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Longest-path layers of the graph with its back edges (found by DFS) left out."""
    succ: dict[str, list[str]] = defaultdict(list)
    for s, t in edges:
        succ[s].append(t)
    state: dict[str, int] = {}
    back: set[tuple[str, str]] = set()
    order: list[str] = []
    starts = [k for k in keys if k == START] + keys
    for root in starts:
        if root in state:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, i = stack[-1]
            nxt = succ[node]
            if i < len(nxt):
                stack[-1] = (node, i + 1)
                child = nxt[i]
                if state.get(child) == 1:
                    back.add((node, child))
                elif child not in state:
                    state[child] = 1
                    stack.append((child, 0))
            else:
                state[node] = 2
                order.append(node)
                stack.pop()
    layer = dict.fromkeys(keys, 0)
    for node in reversed(order):  # a topological order of the forward edges
        for child in succ[node]:
            if (node, child) not in back and child in layer:
                layer[child] = max(layer[child], layer[node] + 1)
    end_layer = max(layer.values(), default=0)
    for key in keys:
        if key == END:
            layer[key] = max(layer[key], end_layer)
    return layer


def graph_svg(
    ir: GraphIR, digest: RunDigest, *, finished: bool, waiting: frozenset[str] = frozenset()
) -> str:
    """Inline SVG of ``ir`` with the nodes and links the run took marked ``ran``, and the
    nodes scheduled next (``waiting``: say an interrupted node) marked ``next``.

    A node box shows how many times the node ran and its total time (see
    :mod:`stargraph.ui._digest` for what that time includes).
    """
    picture = picture_of(ir)
    boxes = _boxes(picture.root)
    keys = [b.key for b in boxes]
    known = set(keys)
    links = [k for k in picture.links if k.source in known and k.target in known]
    layer = _layers(keys, [(k.source, k.target) for k in links])
    rows: dict[int, list[str]] = defaultdict(list)
    for key in keys:
        rows[layer[key]].append(key)
    widest = max((len(r) for r in rows.values()), default=1)
    width = widest * (_W + _GAP_X) + _GAP_X + 40  # room on the right for back-edge arcs
    height = (max(rows, default=0) + 1) * (_H + _GAP_Y) + _GAP_Y
    pos: dict[str, tuple[float, float]] = {}
    for n, row in rows.items():
        row.sort()
        offset = (width - 40 - len(row) * (_W + _GAP_X) + _GAP_X) / 2
        for i, key in enumerate(row):
            pos[key] = (offset + i * (_W + _GAP_X), _GAP_Y / 2 + n * (_H + _GAP_Y))

    ran_roots = set(digest.node_runs) | {START}
    if finished:
        ran_roots.add(END)
    join_target = {k.source: k.target for k in links if "__join" in k.source}

    def ran(key: str) -> bool:
        if key in join_target:
            return _root(join_target[key]) in ran_roots
        return _root(key) in ran_roots

    def taken(source: str, target: str) -> bool:
        rs, rt = _root(source), _root(target)
        if rs == rt:
            return rs in ran_roots
        if source in join_target or target in join_target:
            return ran(source) and ran(target)
        if rt == END:
            return finished and rs in digest.last_nodes
        return (rs, rt) in digest.transitions

    parts: list[str] = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="graph {escape(ir.name)}">',
        # Arrow heads sized in user units: a thick highlighted edge keeps a normal head.
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" '
        'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        '<path d="M0,0L10,5L0,10z"/></marker>'
        '<marker id="arrow-ran" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="11" '
        'markerHeight="11" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        '<path class="ran" d="M0,0L10,5L0,10z"/></marker></defs>',
    ]
    for cluster, inside in _clusters(picture.root):
        corners = [pos[b.key] for b in inside if b.key in pos]
        if corners:
            parts.append(_frame(cluster.title, cluster.key, corners, cluster.key.count("/")))
    for link in links:
        (x1, y1), (x2, y2) = pos[link.source], pos[link.target]
        on = taken(link.source, link.target)
        cls = f"link {link.style}{' ran' if on else ''}"
        marker = "arrow-ran" if on else "arrow"
        if layer[link.target] > layer[link.source]:
            d = f"M{x1 + _W / 2},{y1 + _H} L{x2 + _W / 2},{y2}"
        else:  # a back edge (a loop): an arc out to the right
            sx, ex = x1 + _W, x2 + _W
            bulge = max(sx, ex) + 30
            ys, ye = y1 + _H / 2, y2 + _H / 2
            d = f"M{sx},{ys} C{bulge},{ys} {bulge},{ye} {ex},{ye}"
        title = f"<title>{escape(link.label)}</title>" if link.label else ""
        parts.append(f'<path class="{cls}" d="{d}" marker-end="url(#{marker})">{title}</path>')
    for box in boxes:
        x, y = pos[box.key]
        on = ran(box.key)
        name = box.lines[0] if box.lines else box.key
        runs = digest.node_runs.get(box.key, 0)
        detail = ""
        if runs:
            ms = digest.node_ms.get(box.key, 0)
            detail = f"{runs}x, {ms:,} ms" if digest.timed else f"{runs}x"
        cls = f"node {box.kind}{' ran' if on else ''}{' next' if box.key in waiting else ''}"
        parts.append(
            f'<g class="{cls}" data-node="{escape(box.key)}">'
            f"<title>{escape(' '.join(box.lines))}</title>"
            f'<rect x="{x}" y="{y}" width="{_W}" height="{_H}" rx="6"/>'
            f'<text x="{x + _W / 2}" y="{y + (16 if detail else 25)}">{escape(name[:22])}</text>'
            + (
                f'<text class="detail" x="{x + _W / 2}" y="{y + 32}">{escape(detail)}</text>'
                if detail
                else ""
            )
            + "</g>"
        )
    parts.append("</svg>")
    return "".join(parts)
