"""The workflow a SKILL.md compiles to: one arbiter tool call per step, then a verify node."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Annotated, Any, Final

import orjson
from pydantic import ConfigDict, Field, JsonValue

from stargraph import fathom, reducers
from stargraph._typed import TypedModel
from stargraph.errors import InvalidInputError, SkillValidationError, ToolError
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext
from stargraph.skills._files import SkillModel
from stargraph.skills._services import recorded_arbiter, require_service

__all__ = [
    "Check",
    "StepResult",
    "WorkflowOutput",
    "WorkflowState",
    "WorkflowStep",
    "run_step",
    "verify",
    "workflow_graph",
]

_FROZEN: Final = ConfigDict(frozen=True, extra="forbid")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class WorkflowStep(SkillModel):
    """One ``workflow`` entry: a description, the tool to call and its static params."""

    model_config = _FROZEN

    step: str
    """What the step does (shown in results and errors)."""
    tool: str
    """Tool id or ``ns.name``."""
    params: dict[str, JsonValue] = Field(default_factory=dict)
    """Arguments, fixed when the file is written (they are part of the graph hash)."""


class Check(SkillModel):
    """One machine-checked ``verification`` entry (prose entries stay plain strings).

    It inspects the result of ``step`` (1-based index or step description; default the last
    step) or, with ``tool``, the result of calling that tool with ``params`` at verify time;
    the result must have ``status`` and, when given, ``contains`` a text / ``equals`` a value.
    """

    model_config = _FROZEN

    check: str = ""
    """What is checked (names the check in failures)."""
    step: int | str | None = None
    """Which workflow step's result to inspect."""
    tool: str | None = None
    """A tool to call instead (e.g. read back a written file)."""
    params: dict[str, JsonValue] = Field(default_factory=dict)
    """Arguments for ``tool``."""
    status: str = "success"
    """Expected ``ToolResult.status``."""
    contains: str | None = None
    """Text the payload must contain (JSON payloads are searched as canonical JSON)."""
    equals: JsonValue = None
    """Exact payload expected (``None``: not checked)."""


class StepResult(TypedModel):
    """What one workflow step (or a verification tool call) produced."""

    typed_error = SkillValidationError

    model_config = _FROZEN

    index: int
    """1-based step number (0 for a verification call)."""
    step: str
    """The step's description."""
    tool: str
    """The canonical tool id the arbiter resolved."""
    status: str
    """``ToolResult.status``."""
    summary: str
    """The result summary or the failure reason."""
    payload: JsonValue = None
    """The result payload, when the tool returned one inline."""


class WorkflowOutput(TypedModel):
    """The declared output channels of a SKILL.md workflow skill."""

    typed_error = InvalidInputError

    steps: Annotated[list[StepResult], reducers.append] = []
    """Every step's result, in order."""
    verification_failures: list[str] = []
    """Every failed verification check, each naming the check and what was found."""
    verification_unchecked: list[str] = []
    """Prose checks the verify node cannot evaluate (for a human or a reviewer)."""
    verified: bool = False
    """True when the verify node ran and every machine check passed."""


class WorkflowState(WorkflowOutput):
    """State of a SKILL.md workflow graph: the outputs plus the facts its rules read."""

    step_failed: Annotated[bool, fathom.Fact()] = False
    """A step's tool call failed; rule ``workflow/step_failed`` halts the run."""
    verification_failed: Annotated[bool, fathom.Fact()] = False
    """A check failed; rule ``workflow/verification_failed`` halts the run."""


def workflow_graph(
    name: str,
    steps: tuple[WorkflowStep, ...],
    verification: tuple[str | Check, ...] = (),
) -> Graph[WorkflowState]:
    """The linear graph of a workflow: ``step_1 -> ... -> step_n [-> verify]``, with the
    ``workflow`` rule pack (``step_failed``, ``verification_failed``)."""
    graph = Graph(name, state=WorkflowState)
    ids = []
    for i, step in enumerate(steps, start=1):
        node = f"step_{i}"
        ids.append(node)
        graph = graph.with_node(
            node,
            run_step,
            config={"index": i, "step": step.step, "tool": step.tool, "params": step.params},
            writes=("steps", "step_failed"),
        )
    if verification:
        ids.append("verify")
        checks = [c if isinstance(c, str) else c.model_dump(mode="json") for c in verification]
        graph = graph.with_node(
            "verify",
            verify,
            config={"checks": checks},
            writes=(
                "verification_failures",
                "verification_unchecked",
                "verified",
                "verification_failed",
            ),
        )
    graph = graph.with_edge(START, ids[0])
    for a, b in itertools.pairwise(ids):
        graph = graph.with_edge(a, b)
    return graph.with_edge(ids[-1], END).with_rules(_workflow_pack())


def _workflow_pack() -> fathom.RulePack:
    return fathom.RulePack.from_spec(
        {
            "id": "workflow",
            "version": "1",
            "rules": [
                {
                    "name": "step_failed",
                    "salience": 10,
                    "when": [{"state.step_failed": True}],
                    "then": {"halt": "step_failed"},
                },
                {
                    "name": "verification_failed",
                    "when": [{"state.verification_failed": True}],
                    "then": {"halt": "verification_failed"},
                },
            ],
        }
    )


# --------------------------------------------------------------------------- nodes


def _call(
    ctx: RunContext, tool: str, params: Mapping[str, Any], index: int, step: str
) -> StepResult:
    from stargraph.tools import ToolCall, ToolResult

    arbiter = recorded_arbiter(ctx) or require_service(
        ctx,
        "arbiter",
        lambda found: callable(getattr(found, "dispatch", None)),
        "a tool Arbiter",
        who="workflow node",
    )
    call = ToolCall(tool=tool, args=dict(params), node=ctx.node, allowed=(tool,))
    try:
        result: ToolResult = arbiter.dispatch(call)
    except ToolError as exc:
        result = ToolResult.from_error(exc)
    return StepResult(
        index=index,
        step=step,
        tool=result.tool,
        status=result.status,
        summary=result.summary,
        payload=result.payload,
    )


def run_step(state: WorkflowState, ctx: RunContext) -> dict[str, Any]:
    """Call the step's tool with its static params through the arbiter."""
    del state
    cfg = ctx.config
    result = _call(ctx, cfg["tool"], cfg["params"], cfg["index"], cfg["step"])
    return {"steps": [result], "step_failed": result.status != "success"}


def verify(state: WorkflowState, ctx: RunContext) -> dict[str, Any]:
    """Evaluate the machine checks; list prose checks as unchecked."""
    failures: list[str] = []
    unchecked: list[str] = []
    for i, raw in enumerate(ctx.config["checks"], start=1):
        if isinstance(raw, str):
            unchecked.append(raw)
            continue
        check = Check.model_validate(raw)
        label = check.check or f"check {i}"
        if check.tool is not None:
            result: StepResult | None = _call(ctx, check.tool, check.params, 0, label)
        else:
            result = _find_step(state.steps, check.step)
        if result is None:
            failures.append(f"{label}: step {check.step!r} did not run")
            continue
        failures.extend(f"{label}: {why}" for why in _check_failures(check, result))
    return {
        "verification_failures": failures,
        "verification_unchecked": unchecked,
        "verified": not failures,
        "verification_failed": bool(failures),
    }


def _find_step(steps: list[StepResult], which: int | str | None) -> StepResult | None:
    if which is None:
        return steps[-1] if steps else None
    for result in steps:
        if which in (result.index, result.step):
            return result
    return None


def _check_failures(check: Check, result: StepResult) -> list[str]:
    out = []
    if result.status != check.status:
        out.append(f"expected status {check.status!r}, got {result.status!r} ({result.summary})")
    text = (
        result.payload
        if isinstance(result.payload, str)
        else orjson.dumps(result.payload, option=orjson.OPT_SORT_KEYS).decode()
    )
    if check.contains is not None and check.contains not in text:
        out.append(f"payload does not contain {check.contains!r} (got {_show(text)})")
    if check.equals is not None and result.payload != check.equals:
        out.append(f"payload is {_show(result.payload)}, expected {_show(check.equals)}")
    return out
