"""Static checks of subgraph nodes: embedded children, projections, declared outputs, sites.

Invariant 3 (declared outputs) is checked here wherever it is statically visible: an output
projection naming an undeclared child channel, or a child node declaring a write to a parent
channel the skill does not declare, is an :class:`~stargraph.errors.UndeclaredOutputError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from stargraph.errors import Problem
from stargraph.ir import GraphIR, SubgraphNodeIR

if TYPE_CHECKING:
    from stargraph.skills import NestingProfile

__all__ = ["MAX_DEPTH", "SubgraphProblems", "site_of", "subgraph_problems"]

MAX_DEPTH = 16
"""Deepest nesting of subgraphs accepted when ``compile(nesting=...)`` is not given: the
depth of ``stargraph.skills.DEFAULT_NESTING`` (a test pins the two together; the compiler
does not import the skills package for it)."""


class SubgraphProblems:
    """Problems found, with the undeclared-output ones kept apart (they raise their own type)."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.undeclared: list[Problem] = []


def site_of(node: SubgraphNodeIR) -> str:
    """The node's site id within its graph: the explicit ``site`` or the node id."""
    return node.site or node.id


def _subgraph_nodes(ir: GraphIR) -> Iterator[tuple[int, SubgraphNodeIR]]:
    for i, node in enumerate(ir.nodes):
        if isinstance(node, SubgraphNodeIR):
            yield i, node


def subgraph_problems(
    ir: GraphIR, parent_fields: set[str], nesting: NestingProfile | None = None
) -> SubgraphProblems:
    """Check every subgraph node of ``ir`` against its embedded child and the parent state;
    subgraphs may nest ``nesting.max_depth`` levels deep (default :data:`MAX_DEPTH`)."""
    found = SubgraphProblems()
    for key, child in sorted(ir.subgraphs.items()):
        if child.graph_hash != key:
            found.problems.append(
                Problem(
                    f"/subgraphs/{key}",
                    f"embedded subgraph {child.name!r} is keyed {key} but hashes to "
                    f"{child.graph_hash}: it was altered after embedding",
                    "re-embed the child graph (mount the skill again)",
                )
            )
    depth = MAX_DEPTH if nesting is None else nesting.max_depth
    profile = "" if nesting is None else f" (the {nesting.name!r} nesting profile)"
    _check_nesting(ir, (), found, depth, profile)
    sites: dict[str, str] = {}
    for i, node in _subgraph_nodes(ir):
        where = f"/nodes/{i}"
        label = f"node {node.id!r}" + (f" (skill {node.skill})" if node.skill else "")
        site = site_of(node)
        if site in sites:
            found.problems.append(
                Problem(
                    f"{where}/site",
                    f"{label} uses site {site!r}, already used by node {sites[site]!r}",
                    "give each mounted skill its own site",
                )
            )
        sites.setdefault(site, node.id)
        embedded = ir.subgraphs.get(node.graph)
        if embedded is None:
            found.problems.append(
                Problem(
                    f"{where}/graph",
                    f"{label} refers to subgraph {node.graph}, which is not embedded in the IR",
                    "mount the skill with SubgraphNode.from_skill so its IR is embedded",
                )
            )
            continue
        child = embedded
        child_fields = {f.name for f in child.state.fields}
        declared = set(child.outputs) if child.outputs is not None else child_fields
        for c, p in sorted(node.inputs.items()):
            if c not in child_fields:
                found.problems.append(
                    Problem(f"{where}/inputs/{c}", f"{label}: child has no channel {c!r}", "fix")
                )
            if p not in parent_fields:
                found.problems.append(
                    Problem(f"{where}/inputs/{c}", f"{label}: parent has no channel {p!r}", "fix")
                )
        for c, p in sorted(node.outputs.items()):
            if c not in declared:
                found.undeclared.append(
                    Problem(
                        f"{where}/outputs/{c}",
                        f"{label} maps {c!r} to the parent, but the skill does not declare it "
                        f"as an output (declared: {sorted(declared)})",
                        "add it to the skill's state_schema or drop the mapping",
                    )
                )
            if p not in parent_fields:
                found.problems.append(
                    Problem(
                        f"{where}/outputs/{c}",
                        f"{label}: output {c!r} goes to {p!r}, which is not a channel of the "
                        f"parent state (channels: {sorted(parent_fields)})",
                        "add the field to the parent state or map the output elsewhere",
                    )
                )
        for j, child_node in enumerate(child.nodes):
            for key in child_node.writes or ():
                if key in parent_fields and key not in declared:
                    found.undeclared.append(
                        Problem(
                            f"{where}/subgraph/nodes/{j}/writes",
                            f"{label}: child node {child_node.id!r} writes {key!r}, a channel "
                            "of the parent that the skill does not declare (declared: "
                            f"{sorted(declared)})",
                            "declare it in the skill's state_schema or rename the child field",
                        )
                    )
    return found


def _check_nesting(
    ir: GraphIR, chain: tuple[str, ...], found: SubgraphProblems, depth: int, profile: str
) -> None:
    if len(chain) > depth:
        found.problems.append(
            Problem(
                "/subgraphs",
                f"subgraphs nest deeper than {depth} levels{profile}: {' > '.join(chain)}",
                "flatten the skill composition, or compile with "
                "nesting=NestingProfile(max_depth=...) allowing more levels",
            )
        )
        return
    for _, node in _subgraph_nodes(ir):
        if node.graph in chain:
            found.problems.append(
                Problem(
                    "/subgraphs",
                    f"subgraph {node.graph} contains itself through "
                    f"{' > '.join((*chain, node.graph))}",
                    "a skill cannot (indirectly) mount itself",
                )
            )
            continue
        child = ir.subgraphs.get(node.graph)
        if child is not None:
            _check_nesting(child, (*chain, node.graph), found, depth, profile)
