"""Durability: the bridge between a run and its checkpoint store.

``Persistence`` writes what the executor does - step 0, every committed step (one
transaction each), pending writes of finished siblings, journal entries, status changes - and
``load_run`` reads a run back for resume, fork and time travel. Durability modes:

- ``sync`` (default): each step is committed before the next starts. A crash loses at most the
  step in flight, and of that only the tasks that had not finished.
- ``exit``: the run is kept in memory and written when it finishes, fails or parks. Faster, but
  a crash loses the whole run.

Guarantee, stated honestly: steps are *at-least-once* - a task interrupted by a crash runs
again on resume. Effects made through ``ctx.once`` / ``ctx.now`` / ``ctx.uuid`` /
``ctx.random`` are recorded and not repeated once recorded; effects keyed by
``ctx.idempotency_key`` at their destination are exactly-once.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from stargraph.checkpoint import (
    CheckpointStore,
    JournalEntry,
    MemoryStore,
    PendingWrite,
    RunRecord,
    StepRecord,
    TaskRecord,
    WriteRecord,
)
from stargraph.errors import CorruptCheckpointError
from stargraph.runtime._plan import Task
from stargraph.runtime._run import Run, jsonable
from stargraph.state import Channel

if TYPE_CHECKING:
    from stargraph.runtime._executor import CompiledGraph

__all__ = ["Durability", "Persistence", "code_hash", "load_values"]

Durability = Literal["sync", "exit"]
"""When steps reach the store: after each step (``sync``) or when the run stops (``exit``)."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def code_hash(fns: Sequence[Callable[..., Any]]) -> str:
    """``sha256:`` of the source code of the given callables (by qualified name, sorted)."""
    parts = []
    for fn in fns:
        nested = getattr(fn, "code_hash", None)
        if isinstance(nested, str):
            # A subgraph node: the code of its child graph, hashed the same way.
            parts.append(f"subgraph\n{nested}")
            continue
        name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = repr(fn)  # builtins and C functions: their identity is all we have
        parts.append(f"{name}\n{source}")
    digest = hashlib.sha256("\n\0".join(sorted(set(parts))).encode()).hexdigest()
    return f"sha256:{digest}"


def task_records(tasks: Sequence[Task]) -> tuple[TaskRecord, ...]:
    """Scheduled tasks as records."""
    return tuple(
        TaskRecord(node=t.node, index=t.index, payload=dict(t.payload) if t.payload else None)
        for t in tasks
    )


def joins_record(joins: Mapping[int, frozenset[str]]) -> dict[str, tuple[str, ...]]:
    """Join barriers as JSON (only those part-way filled)."""
    return {str(k): tuple(sorted(v)) for k, v in sorted(joins.items()) if v}


class Persistence:
    """Writes one run's progress to a store (or, in ``exit`` mode, to a buffer first)."""

    def __init__(
        self,
        graph: CompiledGraph[Any],
        store: CheckpointStore,
        *,
        durability: Durability = "sync",
        snapshot_every: int = 50,
    ) -> None:
        self.graph = graph
        self.target = store
        self.durability = durability
        self.store: CheckpointStore = MemoryStore() if durability == "exit" else store
        self.snapshot_every = snapshot_every

    def start(
        self, run: Run, *, parent_run_id: str | None = None, parent_step: int | None = None
    ) -> None:
        """Create the run with its step 0 (the input and the entry tasks)."""
        record = RunRecord(
            run_id=run.run_id,
            graph_name=self.graph.ir.name,
            graph_hash=self.graph.graph_hash,
            code_hash=self.graph.code_hash,
            parent_run_id=parent_run_id,
            parent_step=parent_step,
            created_at=_now(),
        )
        first = StepRecord(
            step=run.step,
            snapshot=jsonable(self.graph.channels, run.values),
            next=task_records(run.tasks),
            joins=joins_record(run.joins_seen),
            created_ms=_now_ms(),
        )
        self.store.create_run(record, first)

    def journal_writer(self, run: Run) -> Callable[[JournalEntry], None]:
        """A function that saves one journal entry of ``run``."""
        store, run_id = self.store, run.run_id
        return lambda entry: store.append_journal(run_id, entry)

    def put_pending(self, run: Run, task: Task, writes: dict[str, Any]) -> None:
        """Save a finished task's writes before its step commits."""
        self.store.put_pending(
            run.run_id,
            PendingWrite(
                step=run.step,
                node=task.node,
                index=task.index,
                writes=jsonable(self.graph.channels, writes),
            ),
        )

    def commit(self, run: Run, results: Sequence[tuple[Task, dict[str, Any]]]) -> None:
        """Commit the step just merged: its writes, next tasks, joins (one transaction)."""
        channels = self.graph.channels
        snapshot = None
        if run.step % self.snapshot_every == 0:
            snapshot = jsonable(channels, run.values)
        record = StepRecord(
            step=run.step,
            writes=tuple(
                WriteRecord(node=t.node, index=t.index, writes=jsonable(channels, w))
                for t, w in sorted(results, key=lambda r: r[0].key)
            ),
            snapshot=snapshot,
            next=task_records(run.tasks),
            joins=joins_record(run.joins_seen),
            attempts=dict(run.attempts),
            facts=run.rules.snapshot() if run.rules is not None else None,
            decision=run.decision,
            calls=tuple(
                sorted(
                    (e for entries in run.journals.values() for e in entries),
                    key=lambda e: (e.node, e.index, e.seq),
                )
            ),
            created_ms=_now_ms(),
        )
        self.store.commit_step(run.run_id, record)
        run.decision = None
        run.attempts = {}
        run.done = {}
        run.journals = {}

    def park(self, run: Run, interrupt: dict[str, Any]) -> None:
        """Mark the run interrupted, waiting on ``interrupt``."""
        self.store.set_status(run.run_id, "interrupted", interrupt=interrupt)
        self.flush(run)

    def finish(self, run: Run, *, stopped_by: str | None = None) -> None:
        """Mark the run done."""
        self.store.set_status(run.run_id, "done", stopped_by=stopped_by)
        self.flush(run)

    def fail(self, run: Run, error: str) -> None:
        """Mark the run failed (it stays resumable: fix the cause, then resume)."""
        self.store.set_status(run.run_id, "failed", error=error)
        self.flush(run)

    def flush(self, run: Run) -> None:
        """In ``exit`` mode, copy the buffered run into the real store."""
        if self.durability != "exit":
            return
        buffer, target, run_id = self.store, self.target, run.run_id
        record = buffer.get_run(run_id)
        steps = buffer.get_steps(run_id)
        target.create_run(record.model_copy(update={"status": "running"}), steps[0])
        for step in steps[1:]:
            target.commit_step(run_id, step)
        pending_step = record.last_step + 1
        for write in buffer.get_pending(run_id, pending_step):
            target.put_pending(run_id, write)
        for entry in buffer.get_journal(run_id, pending_step):
            target.append_journal(run_id, entry)
        target.set_status(
            run_id,
            record.status,
            error=record.error,
            stopped_by=record.stopped_by,
            interrupt=record.interrupt,
        )
        # Later events of the same run (a resume in this process) go straight to the target.
        self.store = target
        self.durability = "sync"


def _corrupt(run_id: str, step: int, exc: Exception) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"checkpoint of run {run_id!r} at step {step} does not fit the state model: {exc}; "
        "the stored row is damaged or was written by another state schema",
        run_id=run_id,
        step=step,
    )


def decode_writes(
    channels: Mapping[str, Channel], run_id: str, step: int, writes: Mapping[str, Any]
) -> dict[str, Any]:
    """Validate stored JSON writes back into channel values."""
    try:
        return {key: channels[key].validate(value) for key, value in writes.items()}
    except (KeyError, ValidationError) as exc:
        raise _corrupt(run_id, step, exc) from exc


def load_values(
    store: CheckpointStore, channels: Mapping[str, Channel], run_id: str, step: int
) -> tuple[dict[str, Any], StepRecord]:
    """Channel values after ``step`` of ``run_id``, and that step's record.

    Starts from the newest snapshot at or before ``step`` and merges the later steps' writes
    through the reducers, in the order they were merged when the run made them.
    """
    base = store.snapshot_step(run_id, step)
    steps = store.get_steps(run_id, start=base, end=step)
    if not steps or steps[-1].step != step or steps[0].snapshot is None:
        raise CorruptCheckpointError(
            f"run {run_id!r} has no complete history up to step {step}; the store lost rows",
            run_id=run_id,
            step=step,
        )
    values = decode_writes(channels, run_id, base, steps[0].snapshot)
    missing = set(channels) - set(values)
    if missing:
        raise _corrupt(run_id, base, KeyError(sorted(missing)))
    for record in steps[1:]:
        for write in record.writes:
            decoded = decode_writes(channels, run_id, record.step, write.writes)
            for key, value in decoded.items():
                reducer = channels[key].reducer
                values[key] = value if reducer is None else reducer(values[key], value)
    return values, steps[-1]


def tasks_from(records: Sequence[TaskRecord]) -> list[Task]:
    """Records back to tasks."""
    return [Task(r.node, r.index, r.payload) for r in records]


def joins_from(record: StepRecord) -> dict[int, frozenset[str]]:
    """Join barriers back from a step record."""
    return {int(k): frozenset(v) for k, v in record.joins.items()}
