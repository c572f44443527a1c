"""SqliteStore keeps WAL checkpoints off the commit path: its connections checkpoint by
themselves only past a large bound, and a thread of the store checkpoints passively every
so many write transactions; closing the store stops that thread."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stargraph.checkpoint import JournalEntry, RunRecord, SqliteStore, StepRecord
from stargraph.checkpoint._sqlite import CHECKPOINT_EVERY

_THREAD = "stargraph-wal-checkpoint"


def _new_run(store: SqliteStore, run_id: str = "r") -> None:
    store.create_run(
        RunRecord(run_id=run_id, graph_name="g", graph_hash="h", code_hash="c"),
        StepRecord(step=0, snapshot={}),
    )


def test_connections_do_not_checkpoint_inside_a_commit(tmp_path: Path) -> None:
    # SQLite's default (1,000 pages) made every few hundredth step commit copy the WAL back
    # into the file and fsync twice, inline.
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        (bound,) = store._conn().execute("PRAGMA wal_autocheckpoint").fetchone()
    assert bound == 10_000


def test_a_thread_of_the_store_checkpoints_and_stops_on_close(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    checkpointed = threading.Event()
    rows = store._db.rows

    def watching(sql: str, params: Sequence[Any] = ()) -> list[Any]:
        found = rows(sql, params)
        if "wal_checkpoint" in sql and threading.current_thread().name == _THREAD:
            checkpointed.set()
        return found

    store._db.rows = watching  # type: ignore[method-assign]
    try:
        _new_run(store)
        for step in range(1, CHECKPOINT_EVERY + 1):
            store.commit_step("r", StepRecord(step=step))
        # Generous: the thread is woken at once, but the machine may be busy.
        assert checkpointed.wait(30), "no background checkpoint after a batch of commits"
    finally:
        store.close()
    assert not [t for t in threading.enumerate() if t.name == _THREAD and t.is_alive()]


def test_journal_rows_count_towards_the_checkpoint_and_commit_alone(tmp_path: Path) -> None:
    # A journal row is one statement committed by itself: it is there for a reader at once
    # (what a crash between the call and the step commit needs), without BEGIN/COMMIT.
    with SqliteStore(tmp_path / "runs.db") as store, SqliteStore(tmp_path / "runs.db") as other:
        _new_run(store)
        entry = JournalEntry(step=1, node="n", seq=0, kind="now", key="k", value=1)
        store.append_journal("r", entry)
        assert other.get_journal("r", 1) == [entry]
        assert store._checkpointer._writes == 1
