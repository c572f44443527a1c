"""Skills: agents and workflows packaged as subgraphs with declared output channels.

A :class:`Skill` carries its own graph (IR, hashed), its own ``state_schema`` - whose fields
are the only channels it may write back to a parent - and the metadata a registry needs.
Mount one in a parent graph with ``SubgraphNode.from_skill(skill, site="step-3")``.

>>> from pydantic import BaseModel
>>> class Out(BaseModel):
...     answer: str = ""
>>> Skill(name="echo", version="1.0.0", kind="utility", description="x", state_schema=Out,
...       subgraph=None).name
'echo'
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from stargraph.errors import Problem, SkillValidationError
from stargraph.ir import ConditionalEdgeIR, GraphIR, SubgraphNodeIR
from stargraph.skills._files import SkillModel, validation_problems
from stargraph.state import schema_problems, set_field_problem

__all__ = [
    "CHOIR_NESTING",
    "DEFAULT_NESTING",
    "Example",
    "NestingProfile",
    "Skill",
    "SkillKind",
    "SkillTier",
    "builtin_side_effects",
    "kind_tool_problems",
    "mounted_skill_problems",
    "side_effects_of",
]

SLUG: Final = re.compile(r"^[a-z][a-z0-9-]+$")
"""Skill names: lowercase letters, digits and dashes (the SKILL.md rule)."""

SEMVER: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
"""Semantic Versioning 2.0.0."""

CHECK: Final = "check"
"""Node ``metadata`` key: ``{"check": True}`` declares a node that judges a model's output by
code (a validation step). A workflow skill may route on its verdict; without it, a router
reachable from an LLM node is LLM-driven control flow."""

TOOL_ID: Final = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+@" + SEMVER.pattern[1:])
"""Tool ids: ``<ns>.<name>[.<sub>]@<semver>``."""


class SkillKind(StrEnum):
    """What kind of capability a skill is; the kind constrains what its graph may do."""

    AGENT = "agent"
    """An open-ended tool loop (uses the ReAct primitive internally)."""
    WORKFLOW = "workflow"
    """A fixed topology: no LLM-driven control flow."""
    UTILITY = "utility"
    """A pure transformation: no tool with write or external side effects."""


class SkillTier(StrEnum):
    """The six functional tiers of the donor taxonomy; a skill carries at most one of them
    among its ``tags``."""

    PM_ORCHESTRATION = "pm-orchestration"
    """Coordinate tasks, delegate to sub-agents, manage pipelines."""
    TASK_ROADMAP = "task-roadmap"
    """Create, read, update and delete tasks, roadmaps, milestones."""
    GSD_EXECUTION = "gsd-execution"
    """Run workflow phases, execute implementation work."""
    AUDIT_PROOF = "audit-proof"
    """Build audit trails, generate proofs, manage memory."""
    INFRASTRUCTURE = "infrastructure"
    """Server operations, health monitoring, watchers."""
    INTEGRATION = "integration"
    """External system connections, sync, notifications."""


_TIERS: Final = frozenset(t.value for t in SkillTier)
_KINDS: Final = frozenset(k.value for k in SkillKind)

TAG: Final = re.compile(r"^[a-z0-9][a-z0-9:._-]*$")
"""Skill tags: lowercase letters, digits and ``: . _ -`` (a tier is one of the tags)."""


class NestingProfile(SkillModel):
    """How deep skills may nest.

    ``max_depth`` counts skill levels below the top-level graph: 1 means a graph may mount
    skills but no skill may mount (start) another skill; 2 allows one more level, and so
    on. Mounting (``SubgraphNode.from_skill``) and nested schemas
    (``SchemaLibrary.build``) enforce it.

    >>> CHOIR_NESTING.max_depth, CHOIR_NESTING.skills_start_skills
    (1, False)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"
    """Shown in errors."""
    max_depth: int = Field(16, ge=1)
    """The deepest skill level allowed (the top-level graph is level 0)."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SkillValidationError(
                validation_problems(exc, "max_depth is an int >= 1"), subject="nesting profile"
            ) from None

    @property
    def skills_start_skills(self) -> bool:
        """Whether a skill may start (mount, spawn) another skill."""
        return self.max_depth > 1

    def depth_problem(self, chain: tuple[str, ...], pointer: str) -> Problem | None:
        """The problem when a chain of nested skills (outermost first) is too deep."""
        if len(chain) <= self.max_depth:
            return None
        why = (
            "a skill cannot start another skill"
            if self.max_depth == 1
            else f"skills nest at most {self.max_depth} levels deep"
        )
        return Problem(
            pointer,
            f"{' > '.join(chain)} nests {len(chain)} skill levels; under the {self.name!r} "
            f"nesting profile {why}",
            "flatten the composition, or use a profile with a larger max_depth",
        )


# The shipped profiles are literals, built without validation so that importing skills does
# not build NestingProfile's schema (tests pin that they equal their validated forms).
DEFAULT_NESTING: Final = NestingProfile.model_construct(name="stargraph", max_depth=16)
"""Skills nest up to 16 levels (far beyond any sane design; it stops runaway IR)."""

CHOIR_NESTING: Final = NestingProfile.model_construct(name="choir", max_depth=1)
"""The Choir profile: nesting depth 1, no skill starts a skill."""


class Example(SkillModel):
    """An input (and optionally the expected output) documenting how to use a skill."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: dict[str, Any]
    output: dict[str, Any] | None = None
    description: str = ""


def slug_suggestion(value: object) -> str | None:
    """The slug closest to a name that is not one (``note_taker`` -> ``note-taker``), or
    ``None`` when nothing of it is left to suggest."""
    guess = re.sub(r"[^a-z0-9]+", "-", str(value).lower()).strip("-")
    guess = re.sub(r"^[^a-z]+", "", guess)
    return guess if SLUG.match(guess) else None


def _slug_fix(value: object) -> str:
    """How to name a skill whose name is not a slug: the slug closest to it, and why node
    ids differ (a skill's name is its SKILL.md name; a node id is only a place in a graph)."""
    rule = "lowercase letters, digits and hyphens, starting with a letter, two or more"
    guess = slug_suggestion(value)
    use = f"use {guess!r}" if guess else "use e.g. 'web-research'"
    return (
        f"{use} ({rule}, as SKILL.md names are); the node the skill is mounted as may keep "
        "any node id: SubgraphNode.from_skill(skill, node_id=...)"
    )


def _bad(field: str, value: Any, why: str, fix: str) -> SkillValidationError:
    return SkillValidationError([Problem(f"/{field}", f"{why}: {value!r}", fix)], subject="skill")


class Skill(SkillModel):
    """A packaged agent or workflow: metadata, its graph, and its declared output channels.

    ``subgraph`` is the graph's IR (inline) or its ``graph_hash`` (a reference resolved
    through a skill registry). ``state_schema``'s fields are the declared output channels:
    the only keys the skill may write back into a parent. ``impls`` supplies callables the
    IR names by registry id (``with_node(..., ref="ns.name")``); it is not part of the skill's
    identity.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(description="Slug: lowercase letters, digits, dashes.")
    version: str = Field(description="SemVer, e.g. 1.2.0.")
    kind: SkillKind
    description: str
    tools: tuple[str, ...] = Field(default=(), description="Tool ids '<ns>.<name>@<ver>'.")
    subgraph: GraphIR | str | None = Field(description="The skill's graph IR, or its hash.")
    system_prompt: str | None = None
    state_schema: type[BaseModel] = Field(description="Fields = declared output channels.")
    requires: tuple[str, ...] = Field(default=(), description="Capability strings.")
    tags: tuple[str, ...] = Field(
        default=(), description="Free tags; at most one is a SkillTier (the taxonomy)."
    )
    examples: tuple[Example, ...] = ()
    bubble_events: bool = True
    _impls: dict[str, Callable[..., Any]] = PrivateAttr(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        # Every problem becomes one SkillValidationError naming field and value, never a bare
        # pydantic ValidationError.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SkillValidationError(
                validation_problems(exc, "correct it"), subject=f"skill {data.get('name', '?')!r}"
            ) from None

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not SLUG.match(value):
            raise _bad("name", value, "skill name is not a slug", _slug_fix(value))
        return value

    @field_validator("version")
    @classmethod
    def _semver(cls, value: str) -> str:
        if not SEMVER.match(value):
            raise _bad("version", value, "version is not SemVer", "use MAJOR.MINOR.PATCH")
        return value

    @field_validator("tools")
    @classmethod
    def _tool_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        problems = [
            Problem(
                f"/tools/{i}",
                f"tool id {tool!r} is not '<ns>.<name>@<semver>'",
                "write e.g. 'web.fetch@1.0.0'",
            )
            for i, tool in enumerate(value)
            if not TOOL_ID.match(tool)
        ]
        if problems:
            raise SkillValidationError(problems, subject="skill")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        problems = [
            Problem(f"/tags/{i}", f"tag {tag!r} is not a lowercase tag", "write e.g. 'audit-proof'")
            for i, tag in enumerate(value)
            if not TAG.match(tag)
        ]
        tiers = [tag for tag in value if tag in _TIERS]
        if len(tiers) > 1:
            problems.append(
                Problem(
                    "/tags",
                    f"a skill belongs to one tier, these tags name {len(tiers)}: {tiers}",
                    "keep one tier tag",
                )
            )
        if problems:
            raise SkillValidationError(problems, subject="skill")
        return value

    @field_validator("subgraph", mode="before")
    @classmethod
    def _subgraph_ref(cls, value: Any) -> Any:
        if isinstance(value, str) and not re.match(r"^sha256:[0-9a-f]{64}$", value):
            raise _bad(
                "subgraph", value, "subgraph reference is not a graph hash", "pass the IR or a hash"
            )
        return value

    @field_validator("state_schema")
    @classmethod
    def _schema(cls, value: type[BaseModel]) -> type[BaseModel]:
        problems = schema_problems(value, pointer="/state_schema")
        problems += nested_set_problems(value, pointer="/state_schema")
        if problems:
            raise SkillValidationError(problems, subject="skill")
        return value

    @model_validator(mode="after")
    def _kind_rules(self) -> Skill:
        problems: list[Problem] = []
        if isinstance(self.subgraph, GraphIR):
            problems += _declared_outputs_exist(self.subgraph, self.state_schema)
            if self.kind is SkillKind.WORKFLOW:
                problems += _llm_routed_nodes(self.subgraph)
        if problems:
            raise SkillValidationError(problems, subject=f"skill {self.name!r}")
        return self

    @classmethod
    def from_graph(
        cls,
        graph: Any,
        *,
        known_tools: Iterable[Any] | Mapping[str, str] | None = None,
        **fields: Any,
    ) -> Skill:
        """A skill compiled from a ``Graph``: its IR becomes ``subgraph`` (with declared
        outputs set to ``state_schema``'s fields) and its registry-id callables travel along
        as ``impls``.

        The kind's tool rule is checked here against the built-in tools and
        ``known_tools`` (tools or ``{id: side_effect}``): a ``utility`` skill using a write or
        external tool is a :class:`~stargraph.errors.SkillValidationError`. Tools unknown
        here are judged when the registry is built (``Registry.build``).
        """
        state_schema = fields["state_schema"]
        ir = graph.to_ir().model_copy(update={"outputs": tuple(sorted(state_schema.model_fields))})
        skill = cls(subgraph=GraphIR.model_validate(ir.model_dump()), **fields)
        skill.check_tools(builtin_side_effects(known_tools), registered=False)
        skill._impls.update(graph.impls)
        return skill

    @property
    def tier(self) -> SkillTier | None:
        """The skill's tier: the one tag that names a :class:`SkillTier`, if any."""
        return next((SkillTier(t) for t in self.tags if t in _TIERS), None)

    @property
    def declared_outputs(self) -> tuple[str, ...]:
        """The channels this skill may write back to a parent (``state_schema``'s fields)."""
        return tuple(sorted(self.state_schema.model_fields))

    @property
    def impls(self) -> Mapping[str, Callable[..., Any]]:
        """Callables for registry ids in the skill's graph."""
        return dict(self._impls)

    def tool_problems(
        self, side_effects: Mapping[str, str], *, registered: bool = True
    ) -> list[Problem]:
        """What :meth:`check_tools` would refuse, as a list (empty when all is well)."""
        return kind_tool_problems(self.kind, self.tools, side_effects, registered=registered)

    def check_tools(self, side_effects: Mapping[str, str], *, registered: bool = True) -> None:
        """The kind's tool rule: a ``utility`` skill may not use a tool whose side effect is
        write or external.

        ``side_effects`` maps tool ids to their ``ToolSpec.side_effect`` (see
        :func:`side_effects_of`). With ``registered=True`` a tool missing from it is a
        problem too (the registry's check); with ``False`` only the tools it knows are
        judged (a skill compiled or mounted before the registry is built). Raises one
        :class:`~stargraph.errors.SkillValidationError` listing every problem.
        """
        problems = self.tool_problems(side_effects, registered=registered)
        if problems:
            raise SkillValidationError(problems, subject=f"skill {self.name!r}")


def kind_tool_problems(
    kind: SkillKind | str,
    tools: Iterable[str],
    side_effects: Mapping[str, str],
    *,
    registered: bool = True,
    pointer: str = "/tools",
) -> list[Problem]:
    """The kind's tool rule for a skill of ``kind`` declaring ``tools``: a ``utility`` skill may not
    use a tool whose side effect (looked up in ``side_effects``) is write or external. With
    ``registered=True`` a tool ``side_effects`` lacks is a problem too. Each problem points
    at ``<pointer>/<index>``."""
    problems = []
    for i, tool in enumerate(tools):
        effect = side_effects.get(tool)
        if effect is None:
            if registered:
                problems.append(
                    Problem(
                        f"{pointer}/{i}",
                        f"tool {tool!r} is not registered",
                        "register it (a plugin's register_tools hook) or drop it from tools",
                    )
                )
        elif kind == SkillKind.UTILITY and effect in ("write", "external"):
            problems.append(
                Problem(
                    f"{pointer}/{i}",
                    f"utility skill uses tool {tool!r} whose side effect is {effect!r}",
                    "make the skill kind 'workflow' or 'agent', or use a read-only tool",
                )
            )
    return problems


def mounted_skill_problems(
    node: SubgraphNodeIR,
    child: GraphIR,
    side_effects: Mapping[str, str],
    *,
    pointer: str = "",
) -> list[Problem]:
    """The kind's tool rule for a skill mounted in an IR: the kind and tools
    ``SubgraphNode.from_skill`` recorded in the node's ``metadata`` (``skill_kind``,
    ``skill_tools``) judged again, so a graph compiled from IR JSON (written by hand, by
    another implementation, or edited) is held to the rules a mount checks. A node without
    them (no skill, or an IR written before they were recorded) has nothing to judge."""
    kind = node.metadata.get("skill_kind")
    if kind is None:
        return []
    where = f"{pointer}/metadata"
    label = f"node {node.id!r}" + (f" (skill {node.skill})" if node.skill else "")
    if not isinstance(kind, str) or kind not in _KINDS:
        return [
            Problem(
                f"{where}/skill_kind",
                f"{label} declares skill kind {kind!r}, which is no skill kind",
                f"use one of {sorted(_KINDS)}",
            )
        ]
    tools = node.metadata.get("skill_tools", [])
    if not (isinstance(tools, list) and all(isinstance(t, str) for t in tools)):
        return [
            Problem(
                f"{where}/skill_tools",
                f"{label} declares skill tools {tools!r}",
                "give a list of tool ids",
            )
        ]
    problems = [
        Problem(p.pointer, f"{label}: {p.message}", p.hint)
        for p in kind_tool_problems(
            kind, tools, side_effects, registered=False, pointer=f"{where}/skill_tools"
        )
    ]
    if kind == SkillKind.WORKFLOW:
        problems += [
            Problem(f"{pointer}{p.pointer}", f"{label}: {p.message}", p.hint)
            for p in _llm_routed_nodes(child)
        ]
    return problems


def side_effects_of(tools: Iterable[Any] | Mapping[str, str]) -> dict[str, str]:
    """``{tool id: side effect}`` of tools (``Tool`` objects or a ``ToolRegistry``), or a
    copy of such a mapping."""
    if isinstance(tools, Mapping):
        return {str(k): str(v) for k, v in tools.items()}
    found: Iterable[Any] = tools
    return {str(t.spec.id): str(t.spec.side_effect) for t in found}


@functools.cache
def _builtin_effects() -> Mapping[str, str]:
    from stargraph.tools import builtin_tools

    return MappingProxyType(side_effects_of(builtin_tools()))


def builtin_side_effects(
    extra: Iterable[Any] | Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The side effects of stargraph's built-in tools, plus those of ``extra`` tools: what
    compiling and mounting a skill judge a ``utility`` skill's tools by."""
    out = dict(_builtin_effects())
    if extra is not None:
        out.update(side_effects_of(extra))
    return out


def nested_set_problems(model: type[BaseModel], pointer: str = "/state_schema") -> list[Problem]:
    """``set`` fields of the models nested in ``model``'s fields, at any depth.

    :func:`stargraph.state.schema_problems` looks at the top-level fields; a set inside a
    nested model (``list[Inner]`` where ``Inner`` has a set) has no stable order either, so
    it would not hash or replay identically. Walked with an explicit stack and a seen set:
    recursive models terminate.
    """
    problems: list[Problem] = []
    seen: set[type[BaseModel]] = {model}
    stack: list[tuple[type[BaseModel], str]] = [
        (inner, f"{pointer}/fields/{name}")
        for name, info in model.model_fields.items()
        for inner in _models_in(info.annotation)
    ]
    while stack:
        current, where = stack.pop(0)
        if current in seen:
            continue
        seen.add(current)
        for name, info in current.model_fields.items():
            here = f"{where}/{current.__name__}/{name}"
            unordered = set_field_problem(here, name, info.annotation, nested_in=current.__name__)
            if unordered is not None:
                problems.append(unordered)
            stack.extend((inner, here) for inner in _models_in(info.annotation))
    return problems


def _models_in(tp: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation mentions (``list[M]``, ``M | None``, ``dict[str,
    M]``, ``Annotated[M, ...]`` ...)."""
    out: list[type[BaseModel]] = []
    stack = [tp]
    while stack:
        current = stack.pop()
        if isinstance(current, type) and issubclass(current, BaseModel):
            out.append(current)
            continue
        stack.extend(a for a in get_args(current) if not isinstance(a, str | int))
    return out


def _declared_outputs_exist(ir: GraphIR, schema: type[BaseModel]) -> list[Problem]:
    child = {f.name for f in ir.state.fields}
    return [
        Problem(
            f"/state_schema/{name}",
            f"declared output {name!r} is not a channel of the skill's graph state "
            f"(channels: {sorted(child)})",
            "add the field to the graph's state model or remove it from state_schema",
        )
        for name in sorted(schema.model_fields)
        if name not in child
    ]


def _llm_routed_nodes(ir: GraphIR) -> list[Problem]:
    """Routers a model steers: every conditional edge whose source an LLM node reaches.

    A model's answer travels through state, so a router any number of plain nodes after an
    LLM node may branch on it: one hop is not enough. A subgraph node whose child graph (at
    any depth) calls a model counts as an LLM node of this graph. The search follows edges,
    not the fields they carry, so it errs on the side of refusing.
    """
    llm: set[str] = {
        str(n.id)
        for n in ir.nodes
        if n.must_stub or (isinstance(n, SubgraphNodeIR) and _calls_a_model(ir, n))
    }
    if not llm:
        return []
    successors: dict[str, set[str]] = {}
    for edge in ir.edges:
        if isinstance(edge, ConditionalEdgeIR):
            successors.setdefault(edge.source, set()).update(edge.mapping.values())
        else:
            for source in edge.sources:
                successors.setdefault(source, set()).add(edge.target)
    # A declared check judges the model's output by code: what follows it, and a router on
    # its verdict, is the workflow's own decision, so the search stops there.
    checks = {n.id for n in ir.nodes if n.metadata.get(CHECK) is True and n.id not in llm}
    # Breadth first from every LLM node at once: each node keeps the shortest path to it.
    came_from: dict[str, str | None] = dict.fromkeys(sorted(llm))
    frontier: list[str] = sorted(llm)
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in sorted(successors.get(node, ())):
                if target not in came_from and target not in checks:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    problems: list[Problem] = []
    for i, edge in enumerate(ir.edges):
        if not isinstance(edge, ConditionalEdgeIR) or edge.source not in came_from:
            continue
        path = [edge.source]
        while (previous := came_from[path[-1]]) is not None:
            path.append(previous)
        path.reverse()
        origin = _llm_label(ir, path[0])
        message = (
            f"workflow skill routes on the output of {origin}"
            if len(path) == 1
            else f"workflow skill routes at {edge.source!r} on state {origin} wrote before "
            f"it (path {' -> '.join(path)})"
        )
        problems.append(
            Problem(
                f"/subgraph/edges/{i}",
                message,
                "use kind 'agent' for LLM-driven control flow, or route on deterministic state"
                + (
                    f" (a node that checks the model's output by code may say so with "
                    f"metadata={{{CHECK!r}: True}}; routing on its verdict is allowed)"
                    if len(path) > 1
                    else ""
                ),
            )
        )
    return problems


def _llm_label(ir: GraphIR, node_id: str) -> str:
    node = next(n for n in ir.nodes if n.id == node_id)
    if node.must_stub:
        return f"LLM node {node_id!r}"
    return f"subgraph node {node_id!r} (its graph calls a model)"


def _calls_a_model(ir: GraphIR, node: SubgraphNodeIR) -> bool:
    """Whether the child graph ``node`` runs has an LLM node at any depth (a stack, not
    recursion: a hand-written IR may nest deeper than any profile allows)."""
    stack = [(ir, node)]
    seen: set[str] = set()
    while stack:
        parent, current = stack.pop()
        child = parent.subgraphs.get(current.graph)
        if child is None or current.graph in seen:
            continue  # a missing child is reported where the graph is compiled
        seen.add(current.graph)
        for inner in child.nodes:
            if inner.must_stub:
                return True
            if isinstance(inner, SubgraphNodeIR):
                stack.append((child, inner))
    return False
