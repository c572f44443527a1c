"""Node kinds beyond plain functions. ``SubgraphNode`` mounts a child graph (a skill).

    graph = Graph(parent_ir).with_node(SubgraphNode.from_skill(rag_skill, site="step-3"))

The child's IR is embedded by hash, so its hash feeds the parent's (Merkle). Inputs are
projected from parent channels into the child; only the skill's declared outputs come back,
once, through the parent's reducers. See ``stargraph.nodes._runner`` for the run-time side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from stargraph.errors import Problem, SkillValidationError
from stargraph.ir import GraphIR, NodeId, SubgraphNodeIR

if TYPE_CHECKING:
    from stargraph.graph import Graph
    from stargraph.skills import NestingProfile, Skill

__all__ = ["SubgraphNode", "nesting_chain"]


def nesting_chain(ir: GraphIR) -> tuple[str, ...]:
    """The deepest chain of subgraphs mounted inside ``ir`` (outermost first), each named
    by its skill (``name@version``) or graph name; empty when ``ir`` mounts nothing.

    Walked with an explicit stack; a chain that comes back to a graph already on it (a
    forged cycle, which compile rejects) is cut there.
    """
    best: tuple[str, ...] = ()
    stack: list[tuple[GraphIR, tuple[str, ...], frozenset[str]]] = [(ir, (), frozenset())]
    while stack:
        current, chain, on_path = stack.pop()
        if len(chain) > len(best):
            best = chain
        for node in current.nodes:
            if not isinstance(node, SubgraphNodeIR) or node.graph in on_path:
                continue
            child = current.subgraphs.get(node.graph)
            if child is None:
                continue
            label = node.skill or child.name
            stack.append((child, (*chain, label), on_path | {node.graph}))
    return best


class SubgraphNode:
    """A child graph mounted as one node. Build it with :meth:`from_skill`."""

    def __init__(
        self,
        *,
        node_id: str,
        child: GraphIR,
        impls: Mapping[str, Callable[..., Any]] | None = None,
        skill: str | None = None,
        site: str | None = None,
        inputs: Mapping[str, str] | None = None,
        outputs: Mapping[str, str] | None = None,
        max_steps: int = 50,
        bubble_events: bool = True,
        skill_kind: str | None = None,
        skill_tools: tuple[str, ...] = (),
        skill_requires: tuple[str, ...] = (),
        destinations: Iterable[str] = (),
    ) -> None:
        self.node_id = node_id
        # Parent nodes a child node's Command(graph=Command.PARENT, goto=...) may go to.
        self.destinations = tuple(destinations)
        self.child = child
        self.impls = dict(impls or {})
        self.skill = skill
        self.site = site
        self.inputs = None if inputs is None else dict(inputs)
        self.outputs = None if outputs is None else dict(outputs)
        self.max_steps = max_steps
        self.bubble_events = bubble_events
        # The mounted skill's kind and tools travel in the node's (unhashed) metadata, so a
        # graph compiled from its IR is held to the kind's tool rule as the mount was.
        self.skill_kind = skill_kind
        self.skill_tools = tuple(skill_tools)
        # And its required capabilities, which the compiler and each run start check.
        self.skill_requires = tuple(skill_requires)

    @classmethod
    def from_skill(
        cls,
        skill: Skill,
        site: str | None = None,
        *,
        inputs: Mapping[str, str] | None = None,
        outputs: Mapping[str, str] | None = None,
        max_steps: int = 50,
        node_id: str | None = None,
        registry: Mapping[str, GraphIR] | None = None,
        known_tools: Iterable[Any] | Mapping[str, str] | None = None,
        nesting: NestingProfile | None = None,
        destinations: Iterable[str] = (),
    ) -> SubgraphNode:
        """Mount ``skill``. ``inputs``/``outputs`` map child channels to parent channels
        (default: same names; outputs default to every declared output). ``node_id``
        defaults to ``site`` or the skill's name; mount a skill twice with two node ids.
        ``registry`` resolves a skill whose ``subgraph`` is a hash reference.

        Refused with a :class:`~stargraph.errors.SkillValidationError`: a ``utility`` skill
        using a write or external tool (judged by the built-in tools and ``known_tools``),
        and a skill nesting deeper than ``nesting`` allows (default
        :data:`~stargraph.skills.DEFAULT_NESTING`; :data:`~stargraph.skills.CHOIR_NESTING`
        refuses a skill that mounts another skill).

        ``destinations`` lists the parent's nodes a child node may send the run to with
        ``Command(graph=Command.PARENT, goto=...)``; the command's ``update`` may write only
        the parent channels the skill's outputs go to."""
        from stargraph.skills import DEFAULT_NESTING, builtin_side_effects

        skill.check_tools(builtin_side_effects(known_tools), registered=False)
        child = skill.subgraph
        if isinstance(child, str):
            found = (registry or {}).get(child)
            if found is None:
                raise SkillValidationError.at(
                    "/subgraph",
                    f"skill {skill.name!r} refers to subgraph {child}, which is not in "
                    "the registry given",
                    "pass registry={hash: GraphIR} or embed the IR in the skill",
                    subject=f"skill {skill.name!r}",
                )
            child = found
        if child is None:
            raise SkillValidationError.at(
                "/subgraph",
                f"skill {skill.name!r} has no subgraph",
                "give it one",
                subject=f"skill {skill.name!r}",
            )
        label = f"{skill.name}@{skill.version}"
        too_deep = (nesting or DEFAULT_NESTING).depth_problem(
            (label, *nesting_chain(child)), "/subgraph"
        )
        if too_deep is not None:
            raise SkillValidationError([too_deep], subject=f"skill {skill.name!r}")
        declared = tuple(sorted(skill.state_schema.model_fields))
        if child.outputs != declared:
            child = GraphIR.model_validate({**child.model_dump(), "outputs": declared})
        if outputs is not None:
            undeclared = sorted(set(outputs) - set(declared))
            if undeclared:
                from stargraph.errors import UndeclaredOutputError

                raise UndeclaredOutputError(
                    [
                        Problem(
                            f"/outputs/{key}",
                            f"skill {skill.name!r} does not declare output {key!r} "
                            f"(declared: {list(declared)})",
                            "add the field to the skill's state_schema or drop it from outputs",
                        )
                        for key in undeclared
                    ],
                    subject=f"skill {skill.name!r}",
                )
        return cls(
            node_id=node_id or site or skill.name,
            child=child,
            impls=skill.impls,
            skill=label,
            site=site,
            inputs=inputs,
            outputs=outputs,
            max_steps=max_steps,
            bubble_events=skill.bubble_events,
            destinations=destinations,
            skill_kind=str(skill.kind),
            skill_tools=tuple(skill.tools),
            skill_requires=tuple(skill.requires),
        )

    def mount(
        self, graph: Graph[Any]
    ) -> tuple[SubgraphNodeIR, dict[str, GraphIR], dict[str, Callable[..., Any]]]:
        """The node's IR (with default projections filled in against the parent's state),
        the child IR to embed, and the child's callables."""
        parent = set(graph.state.model_fields)
        child_fields = {f.name for f in self.child.state.fields}
        declared = set(self.child.outputs or child_fields)
        inputs = self.inputs
        if inputs is None:
            inputs = {name: name for name in sorted(child_fields & parent)}
        outputs = self.outputs
        if outputs is None:
            outputs = {name: name for name in sorted(declared)}
        node = SubgraphNodeIR(
            id=NodeId(self.node_id),
            graph=self.child.graph_hash,
            skill=self.skill,
            site=self.site,
            inputs=inputs,
            outputs=outputs,
            max_steps=self.max_steps,
            bubble_events=self.bubble_events,
            destinations=self.destinations,
            metadata=(
                {
                    "skill_kind": self.skill_kind,
                    "skill_tools": list(self.skill_tools),
                    **(
                        {"skill_requires": list(self.skill_requires)} if self.skill_requires else {}
                    ),
                }
                if self.skill_kind is not None
                else {}
            ),
        )
        return node, {self.child.graph_hash: self.child}, self.impls
