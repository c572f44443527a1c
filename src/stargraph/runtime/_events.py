"""Typed run events, streamed by ``CompiledGraph.stream`` and recorded in history.

Every event carries ``run_id``, ``step`` and ``path`` (the site ids from the root graph down to
the graph that emitted it, ``()`` at the root), plus ``node`` where one is involved. Within a
step, node events are emitted in a fixed order (node id, then send index) whatever order the
nodes finished in, so two runs of the same graph stream identical event sequences.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from stargraph._typed import TypedModel
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
    """A node execution finished with these (validated) writes."""

    kind: Literal["node_finished"] = "node_finished"
    index: int = 0
    writes: dict[str, Any] = Field(default_factory=dict)
    attempts: int = Field(default=1, description="Attempts used, counting retries.")


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
