"""What a checkpoint store keeps: runs, committed steps, pending writes and the call journal.

All records are frozen pydantic models with JSON-only payloads, so any store can serialise
them (SQLite and PostgreSQL keep them as JSON blobs; the in-memory store keeps the objects).

A step record stores the *raw writes* of the step's tasks (in merge order), not the merged
state: state at step ``k`` is the latest snapshot at or before ``k`` with the writes of the
later steps merged through the graph's reducers. That keeps a 1,000-step run that appends to a
list linear in size instead of quadratic; a full snapshot every few steps keeps reads fast.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "JournalEntry",
    "PendingWrite",
    "Recording",
    "RunRecord",
    "RunStatus",
    "StepRecord",
    "TaskRecord",
    "WriteRecord",
]

RunStatus = Literal["running", "interrupted", "done", "failed"]
"""``running`` also covers a run whose process died: it is resumable."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class TaskRecord(BaseModel):
    """A scheduled node execution: ``(node, index)`` plus a ``Send`` payload, if any."""

    model_config = _FROZEN

    node: str
    index: int = 0
    payload: dict[str, Any] | None = None


class WriteRecord(BaseModel):
    """The validated writes of one finished task, as JSON."""

    model_config = _FROZEN

    node: str
    index: int = 0
    writes: dict[str, Any]


class JournalEntry(BaseModel):
    """One recorded non-deterministic call made by a task (clock, id, random, ``ctx.once``,
    an interrupt's response; later LLM and tool calls), served back on re-execution."""

    model_config = _FROZEN

    step: int
    node: str
    index: int = 0
    seq: int = Field(ge=0, description="Position of the call within the task execution.")
    kind: str
    key: str = Field(default="", description="What was called: a name, a model, a tool id.")
    value: Any = None
    fingerprint: str = Field(default="", description="sha256 of the canonical request.")
    request: Any = Field(default=None, description="The request, to explain a divergence.")


class StepRecord(BaseModel):
    """One committed step (step 0 is the input). Appended once, never updated."""

    model_config = _FROZEN

    step: int = Field(ge=0)
    writes: tuple[WriteRecord, ...] = ()
    snapshot: dict[str, Any] | None = Field(
        default=None, description="Full channel values after this step (step 0 and every Nth)."
    )
    next: tuple[TaskRecord, ...] = ()
    joins: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Join edge index -> sources seen since it last fired."
    )
    facts: Any = Field(default=None, description="Rule engine snapshot after this step.")
    decision: dict[str, Any] | None = Field(
        default=None,
        description="The rule decision taken at this step (kind, rule, targets, reason), "
        "when it was not 'continue'.",
    )
    attempts: dict[str, int] = Field(
        default_factory=dict, description="'node/index' -> attempts used, when more than one."
    )
    calls: tuple[JournalEntry, ...] = Field(
        default=(),
        description="Every recorded call of the step's tasks (model, tools, clock, ids): the "
        "replay record.",
    )
    created_ms: int = Field(
        default=0,
        description="Commit time, milliseconds since the Unix epoch (an int: it is stored with "
        "every step, and an ISO string would be a third of a small step's bytes).",
    )


class RunRecord(BaseModel):
    """A run's identity and status. ``last_step`` is the newest committed step."""

    model_config = _FROZEN

    run_id: str
    graph_name: str
    graph_hash: str
    code_hash: str
    status: RunStatus = "running"
    last_step: int = 0
    parent_run_id: str | None = None
    parent_step: int | None = None
    created_at: str = ""
    updated_at: str = ""
    error: str | None = None
    stopped_by: str | None = Field(default=None, description="Rule that halted the run.")
    interrupt: Any = Field(default=None, description="What an interrupted run waits on.")


class PendingWrite(BaseModel):
    """Writes of a task that finished in a step whose siblings had not finished yet.

    Saved at once, so a crash before the step commits does not re-run the finished task.
    """

    model_config = _FROZEN

    step: int
    node: str
    index: int = 0
    writes: dict[str, Any]


class Recording(BaseModel):
    """A whole recorded run: its record and every committed step, with the calls of each.

    What ``CompiledGraph.replay`` consumes, and what a cassette file holds.
    """

    model_config = _FROZEN

    run: RunRecord
    steps: tuple[StepRecord, ...]

    @classmethod
    def from_store(cls, store: Any, run_id: str) -> Recording:
        """Read a run and all of its steps from a checkpoint store."""
        return cls(run=store.get_run(run_id), steps=tuple(store.get_steps(run_id)))
