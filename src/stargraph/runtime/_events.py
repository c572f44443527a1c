"""Typed run events, streamed by ``CompiledGraph.stream`` and recorded in history.

Every event carries ``run_id``, ``step`` and ``path`` (the site ids from the root graph down to
the graph that emitted it, ``()`` at the root), plus ``node`` where one is involved. Within a
step, node events are emitted in a fixed order (node id, then send index) whatever order the
nodes finished in, so two runs of the same graph stream identical event sequences.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import ConfigDict, Field

from stargraph._typed import TypedModel
from stargraph._unchecked import unchecked
from stargraph.errors import RunError

# What stargraph.runtime re-exports (it star-imports this module).
__all__ = [
    "Event",
    "NodeFinished",
    "NodeStarted",
    "RuleDecided",
    "RunCancelled",
    "RunFailed",
    "RunFinished",
    "RunInterrupted",
    "RunStarted",
    "StepCompleted",
]


class _EventBase(TypedModel):
    typed_error = RunError
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    step: int
    path: tuple[str, ...] = ()
    node: str | None = None


class RunStarted(_EventBase):
    """A run began (or resumed: ``resumed=True``)."""

    kind: Literal["run_started"] = "run_started"
    graph_hash: str
    resumed: bool = False


class NodeStarted(_EventBase):
    """A node execution began. ``index`` tells ``Send`` executions of one node apart."""

    kind: Literal["node_started"] = "node_started"
    index: int = 0
    attempt: int = 1


class NodeFinished(_EventBase):
    """A node execution finished with these (validated) writes; ``cached``: its node cache
    served them (the node's body did not run)."""

    kind: Literal["node_finished"] = "node_finished"
    index: int = 0
    writes: dict[str, Any] = Field(default_factory=dict)
    attempts: int = Field(default=1, description="Attempts used, counting retries.")
    cached: bool = Field(default=False, description="The writes came from the node's cache.")


class StepCompleted(_EventBase):
    """All nodes of a step finished and their writes were merged; ``next`` runs after."""

    kind: Literal["step_completed"] = "step_completed"
    nodes: tuple[str, ...]
    next: tuple[str, ...]


class RuleDecided(_EventBase):
    """A rule pack took a decision (goto / halt / interrupt) naming the rule that fired."""

    kind: Literal["rule_decided"] = "rule_decided"
    decision: str
    rule: str | None = None
    target: str | None = None
    reason: str | None = None


class RunInterrupted(_EventBase):
    """The run stopped at an interrupt, waiting for ``resume(run_id, response=...)``."""

    kind: Literal["run_interrupted"] = "run_interrupted"
    payload: Any = None


class RunFinished(_EventBase):
    """The run reached its end; ``state`` is the final state as JSON data. ``status`` is
    ``done`` (the graph reached END, or a success rule ended it) or ``halted`` (a halt rule
    stopped it: ``stopped_by`` names the rule, ``stop_reason`` says why)."""

    kind: Literal["run_finished"] = "run_finished"
    state: dict[str, Any]
    stopped_by: str | None = Field(
        default=None, description="The rule that ended the run (halted it, or finished it)."
    )
    status: Literal["done", "halted"] = Field(
        default="done", description="``halted`` when a halt rule stopped the run."
    )
    stop_reason: str | None = Field(
        default=None, description="Why the rule ``stopped_by`` ended the run."
    )


class RunCancelled(_EventBase):
    """The run was cancelled and stopped after ``step``, its last committed step
    (``reason``: what cancelled it); ``resume(run_id)`` continues it."""

    kind: Literal["run_cancelled"] = "run_cancelled"
    reason: str


class RunFailed(_EventBase):
    """The run stopped with an error."""

    kind: Literal["run_failed"] = "run_failed"
    error: str
    error_type: str


Event = Annotated[
    RunStarted
    | NodeStarted
    | NodeFinished
    | StepCompleted
    | RuleDecided
    | RunInterrupted
    | RunFinished
    | RunFailed
    | RunCancelled,
    Field(discriminator="kind"),
]
"""Any run event, discriminated on ``kind``."""


_E = TypeVar("_E", bound=_EventBase)
# Per event class: every field's default, in declared order (a field whose default comes
# from a factory holds None there), and the factories.
_TEMPLATES: dict[type[_EventBase], tuple[dict[str, Any], dict[str, Any]]] = {}


def made(kind: type[_E], fields: dict[str, Any]) -> _E:
    """The event ``kind(**fields)``, built without validation: the engine makes its events
    of values of the declared types (a run's id, step and path, node names, writes it
    turned into JSON data), and a stream in mode ``events`` builds several per step."""
    template = _TEMPLATES.get(kind)
    if template is None:
        template = _TEMPLATES[kind] = _template(kind)
    defaults, factories = template
    values = {**defaults, **fields}
    if factories:
        for name, factory in factories.items():
            if name not in fields:
                values[name] = factory()
    return unchecked(kind, values, set(fields))


# The fields a node event's maker sets, shared by all its events (read-only, as
# ``_unchecked.every_field``): one set fewer to build per event.
_STARTED_SET: Final = {"run_id", "step", "path", "node", "index"}
_FINISHED_SET: Final = {"run_id", "step", "path", "node", "index", "writes", "attempts"}
_CACHED_SET: Final = _FINISHED_SET | {"cached"}
_STEP_SET: Final = {"run_id", "step", "path", "nodes", "next"}


def node_started(
    run_id: str, step: int, path: tuple[str, ...], node: str, index: int
) -> NodeStarted:
    """``made(NodeStarted, ...)`` for the event a stream in mode ``events`` makes most (one
    per task), its fields in declared order without a template to merge."""
    return unchecked(
        NodeStarted,
        {
            "run_id": run_id,
            "step": step,
            "path": path,
            "node": node,
            "kind": "node_started",
            "index": index,
            "attempt": 1,
        },
        _STARTED_SET,
    )


def node_finished(
    run_id: str,
    step: int,
    path: tuple[str, ...],
    node: str,
    index: int,
    *,
    writes: dict[str, Any],
    attempts: int,
    cached: bool,
) -> NodeFinished:
    """``made(NodeFinished, ...)`` for a task's end, as :func:`node_started`."""
    return unchecked(
        NodeFinished,
        {
            "run_id": run_id,
            "step": step,
            "path": path,
            "node": node,
            "kind": "node_finished",
            "index": index,
            "writes": writes,
            "attempts": attempts,
            "cached": cached,
        },
        _CACHED_SET if cached else _FINISHED_SET,
    )


def step_completed(
    run_id: str, step: int, path: tuple[str, ...], nodes: tuple[str, ...], next: tuple[str, ...]
) -> StepCompleted:
    """``made(StepCompleted, ...)`` for a step's end, as :func:`node_started`."""
    return unchecked(
        StepCompleted,
        {
            "run_id": run_id,
            "step": step,
            "path": path,
            "node": None,
            "kind": "step_completed",
            "nodes": nodes,
            "next": next,
        },
        _STEP_SET,
    )


def _template(kind: type[_EventBase]) -> tuple[dict[str, Any], dict[str, Any]]:
    defaults: dict[str, Any] = {}
    factories: dict[str, Any] = {}
    for name, info in kind.model_fields.items():
        defaults[name] = None if info.is_required() else info.get_default()
        if info.default_factory is not None:
            factories[name] = info.default_factory
    return defaults, factories
