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

import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, Final

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
from stargraph.ir import ConditionalEdgeIR, GraphIR
from stargraph.state import schema_problems

__all__ = ["Example", "Skill", "SkillKind"]

SLUG: Final = re.compile(r"^[a-z][a-z0-9-]+$")
"""Skill names: lowercase letters, digits and dashes (the SKILL.md rule, D1)."""

SEMVER: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
"""Semantic Versioning 2.0.0."""

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


class Example(BaseModel):
    """An input (and optionally the expected output) documenting how to use a skill."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: dict[str, Any]
    output: dict[str, Any] | None = None
    description: str = ""


def _bad(field: str, value: Any, why: str, fix: str) -> SkillValidationError:
    return SkillValidationError([Problem(f"/{field}", f"{why}: {value!r}", fix)], subject="skill")


class Skill(BaseModel):
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
    examples: tuple[Example, ...] = ()
    bubble_events: bool = True
    _impls: dict[str, Callable[..., Any]] = PrivateAttr(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        # Every problem becomes one SkillValidationError naming field and value, never a bare
        # pydantic ValidationError.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            problems: list[Problem] = []
            for err in exc.errors():
                cause = err.get("ctx", {}).get("error")
                if isinstance(cause, SkillValidationError):
                    problems.extend(cause.problems)
                    continue
                where = "/" + "/".join(str(p) for p in err["loc"])
                problems.append(
                    Problem(where, f"{err['msg']} (got {err.get('input')!r})", "correct it")
                )
            raise SkillValidationError(
                problems, subject=f"skill {data.get('name', '?')!r}"
            ) from None

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not SLUG.match(value):
            raise _bad("name", value, "skill name is not a slug", "use e.g. 'web-research'")
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
    def from_graph(cls, graph: Any, **fields: Any) -> Skill:
        """A skill from a ``Graph``: its IR becomes ``subgraph`` (with declared outputs set to
        ``state_schema``'s fields) and its registry-id callables travel along as ``impls``."""
        state_schema = fields["state_schema"]
        ir = graph.to_ir().model_copy(update={"outputs": tuple(sorted(state_schema.model_fields))})
        skill = cls(subgraph=GraphIR.model_validate(ir.model_dump()), **fields)
        skill._impls.update(graph.impls)
        return skill

    @property
    def declared_outputs(self) -> tuple[str, ...]:
        """The channels this skill may write back to a parent (``state_schema``'s fields)."""
        return tuple(sorted(self.state_schema.model_fields))

    @property
    def impls(self) -> Mapping[str, Callable[..., Any]]:
        """Callables for registry ids in the skill's graph."""
        return dict(self._impls)

    def check_tools(self, side_effects: Mapping[str, str]) -> None:
        """E2: a ``utility`` skill may not use a tool whose side effect is write or external.

        ``side_effects`` maps tool ids to their ``ToolSpec.side_effect`` (a tool registry can
        provide it); unknown tools are reported too.
        """
        problems = []
        for i, tool in enumerate(self.tools):
            effect = side_effects.get(tool)
            if effect is None:
                problems.append(
                    Problem(f"/tools/{i}", f"tool {tool!r} is not registered", "register it")
                )
            elif self.kind is SkillKind.UTILITY and effect in ("write", "external"):
                problems.append(
                    Problem(
                        f"/tools/{i}",
                        f"utility skill uses tool {tool!r} whose side effect is {effect!r}",
                        "make the skill kind 'workflow' or 'agent', or use a read-only tool",
                    )
                )
        if problems:
            raise SkillValidationError(problems, subject=f"skill {self.name!r}")


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
    # An LLM node (must_stub) feeding a router is control flow chosen by the model.
    llm = {n.id for n in ir.nodes if n.must_stub}
    return [
        Problem(
            f"/subgraph/edges/{i}",
            f"workflow skill routes on the output of LLM node {edge.source!r}",
            "use kind 'agent' for LLM-driven control flow, or route on deterministic state",
        )
        for i, edge in enumerate(ir.edges)
        if isinstance(edge, ConditionalEdgeIR) and edge.source in llm
    ]
