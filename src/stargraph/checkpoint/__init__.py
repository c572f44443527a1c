"""Checkpoint stores: every step of a run, durably, so it can resume after a crash.

``MemoryStore`` for tests, ``SqliteStore`` (the embedded default, ``.stargraph/stargraph.db``)
for one machine; both pass the shared conformance suite in
``stargraph.checkpoint.conformance``.
"""

from __future__ import annotations

from stargraph.checkpoint._memory import MemoryStore
from stargraph.checkpoint._protocol import CheckpointStore
from stargraph.checkpoint._records import (
    JournalEntry,
    PendingWrite,
    RunRecord,
    RunStatus,
    StepRecord,
    TaskRecord,
    WriteRecord,
)
from stargraph.checkpoint._sqlite import SqliteStore

__all__ = [
    "CheckpointStore",
    "JournalEntry",
    "MemoryStore",
    "PendingWrite",
    "RunRecord",
    "RunStatus",
    "SqliteStore",
    "StepRecord",
    "TaskRecord",
    "WriteRecord",
]
