"""The ``CheckpointStore`` protocol: the one seam between the executor and storage."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from stargraph.checkpoint._records import (
    JournalEntry,
    PendingWrite,
    RunRecord,
    RunStatus,
    StepRecord,
)

__all__ = ["CheckpointStore"]


@runtime_checkable
class CheckpointStore(Protocol):
    """Durable storage of runs. Every method is atomic; ``commit_step`` is one transaction.

    Implementations must pass ``stargraph.checkpoint.conformance`` and be safe to share
    between threads. Errors are :class:`~stargraph.errors.CheckpointError` subclasses:
    ``RunNotFoundError`` for an unknown run, ``CorruptCheckpointError`` (naming run and step)
    for a payload that cannot be decoded, ``CheckpointError`` for a conflicting write such as
    a second commit of the same step (which is how two writers are fenced apart).
    """

    def create_run(self, run: RunRecord, first: StepRecord) -> None:
        """Insert a new run with its step 0, atomically. Raises if the run id exists."""
        ...

    def commit_step(
        self,
        run_id: str,
        step: StepRecord,
        *,
        status: RunStatus = "running",
        error: str | None = None,
        stopped_by: str | None = None,
        interrupt: object = None,
    ) -> None:
        """In one transaction: append ``step`` (must be ``last_step + 1``), set the run's
        ``last_step``/status fields, and drop the pending writes and journal of that step."""
        ...

    def set_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        error: str | None = None,
        stopped_by: str | None = None,
        interrupt: object = None,
    ) -> None:
        """Change a run's status without committing a step (park, fail, finish)."""
        ...

    def set_graph(self, run_id: str, *, graph_hash: str, code_hash: str) -> None:
        """Record that the run continues under another graph (an explicit migration)."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record; ``RunNotFoundError`` if there is none."""
        ...

    def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by status."""
        ...

    def get_steps(self, run_id: str, *, start: int = 0, end: int | None = None) -> list[StepRecord]:
        """Committed steps ``start..end`` (inclusive) in order."""
        ...

    def snapshot_step(self, run_id: str, at_or_before: int) -> int:
        """The newest step ``<= at_or_before`` that holds a full snapshot (0 always does)."""
        ...

    def put_pending(self, run_id: str, write: PendingWrite) -> None:
        """Save one finished task's writes for a step not yet committed (idempotent)."""
        ...

    def get_pending(self, run_id: str, step: int) -> list[PendingWrite]:
        """Pending writes saved for ``step``, ordered by ``(node, index)``."""
        ...

    def append_journal(self, run_id: str, entry: JournalEntry) -> None:
        """Record one call of a task execution (idempotent on its position)."""
        ...

    def get_journal(self, run_id: str, step: int) -> list[JournalEntry]:
        """Journal entries of ``step``, ordered by ``(node, index, seq)``."""
        ...

    def close(self) -> None:
        """Release connections. The store is unusable afterwards."""
        ...
