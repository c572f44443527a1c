"""SqliteStore writes a pending write as one statement that commits by itself (no
``BEGIN``/``COMMIT`` around it), and a journal entry as no statement at all (it is appended to
the run's journal file): each visible to every other store at once, as a crash between a call
and its step's commit needs, and a row or entry of an unknown run is still refused with
``RunNotFoundError``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stargraph.checkpoint import JournalEntry, PendingWrite, RunRecord, SqliteStore, StepRecord
from stargraph.checkpoint._lease import new_owner
from stargraph.errors import RunNotFoundError


def _new_run(store: SqliteStore, run_id: str = "r") -> None:
    store.create_run(
        RunRecord(run_id=run_id, graph_name="g", graph_hash="h", code_hash="c"),
        StepRecord(step=0, snapshot={}),
    )


def _traced(store: SqliteStore) -> list[str]:
    statements: list[str] = []
    store._conn().set_trace_callback(statements.append)
    return statements


def test_a_journal_entry_is_no_statement_and_visible_at_once(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store, SqliteStore(tmp_path / "runs.db") as other:
        _new_run(store)
        statements = _traced(store)
        entry = JournalEntry(step=1, node="n", seq=0, kind="now", key="k", value=1)
        store.append_journal("r", entry)
        assert statements == []
        assert other.get_journal("r", 1) == [entry]


def test_a_pending_write_is_one_statement_visible_at_once(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store, SqliteStore(tmp_path / "runs.db") as other:
        _new_run(store)
        statements = _traced(store)
        write = PendingWrite(step=1, node="n", writes={"x": 1})
        store.put_pending("r", write)
        assert [s.split()[0] for s in statements] == ["INSERT"]
        assert other.get_pending("r", 1) == [write]


def _refused_row(store: SqliteStore, what: str) -> None:
    if what == "journal":
        entry = JournalEntry(step=1, node="n", seq=0, kind="now", key="k", value=1)
        store.append_journal("ghost", entry)
    else:
        store.put_pending("ghost", PendingWrite(step=1, node="n", writes={"x": 1}))


@pytest.mark.parametrize("what", ["journal", "pending"])
def test_a_row_of_an_unknown_run_is_refused(tmp_path: Path, what: str) -> None:
    # Still the typed error naming the run, now that the insert commits by itself.
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        with pytest.raises(RunNotFoundError, match="no run 'ghost'") as caught:
            _refused_row(store, what)
        if what == "pending":  # the foreign key refused the row; an entry is looked up first
            assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
        assert not (tmp_path / "runs.db-calls").exists() or not any(
            (tmp_path / "runs.db-calls").iterdir()
        ), "no journal file for the unknown run"
        assert store.get_journal("r", 1) == []
        assert store.get_pending("r", 1) == []


def test_a_step_of_a_run_made_here_with_nothing_pending_deletes_nothing(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        statements = _traced(store)
        store.commit_step("r", StepRecord(step=1))
        assert not [s for s in statements if s.startswith("DELETE")]
        # With a pending write and a journal row of the step, its commit drops them.
        store.put_pending("r", PendingWrite(step=2, node="n", writes={"x": 1}))
        entry = JournalEntry(step=2, node="n", seq=0, kind="now", key="k", value=1)
        store.append_journal("r", entry)
        store.commit_step("r", StepRecord(step=2))
        assert store.get_pending("r", 2) == []
        assert store.get_journal("r", 2) == []


def test_rows_another_owner_left_are_dropped_by_the_next_owners_commit(tmp_path: Path) -> None:
    # The run was made by this store, then another process took it over (acquire) and
    # crashed mid-step, leaving a pending write and a journal row of the step in flight.
    with SqliteStore(tmp_path / "runs.db") as store, SqliteStore(tmp_path / "runs.db") as other:
        _new_run(store)
        other.acquire("r", new_owner())
        other.put_pending("r", PendingWrite(step=1, node="n", writes={"x": 1}))
        other.append_journal(
            "r", JournalEntry(step=1, node="n", seq=0, kind="now", key="k", value=1)
        )
        owner = new_owner()
        store.acquire("r", owner)  # this store takes the run back, then commits the step
        store.commit_step("r", StepRecord(step=1), owner=owner.token)
        assert store.get_pending("r", 1) == []
        assert store.get_journal("r", 1) == []


def test_a_step_that_only_journaled_deletes_nothing(tmp_path: Path) -> None:
    # An agent's step journals its calls but saves no pending write: its entries are in the
    # run's journal file, so its commit deletes no row.
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        entry = JournalEntry(step=1, node="n", seq=0, kind="now", key="k", value=1)
        store.append_journal("r", entry)
        statements = _traced(store)
        store.commit_step("r", StepRecord(step=1))
        assert not [s for s in statements if s.startswith("DELETE")]
        assert store.get_journal("r", 1) == []
        # And one that only saved a pending write deletes only from pending.
        store.put_pending("r", PendingWrite(step=2, node="n", writes={"x": 1}))
        statements.clear()
        store.commit_step("r", StepRecord(step=2))
        deletes = [s for s in statements if s.startswith("DELETE")]
        assert [d.split()[2] for d in deletes] == ["pending"]
        assert store.get_pending("r", 2) == []


def test_every_connection_checkpoints_the_wal_at_the_store_s_size(tmp_path: Path) -> None:
    from stargraph.checkpoint._sqlite import WAL_CHECKPOINT_PAGES

    assert WAL_CHECKPOINT_PAGES > 1000  # SQLite's default, which checkpointed too often
    with SqliteStore(tmp_path / "runs.db") as store:
        pages = store._conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        assert pages == WAL_CHECKPOINT_PAGES
        # A connection of another thread gets it too.
        import threading

        seen: list[int] = []
        worker = threading.Thread(
            target=lambda: seen.append(
                store._conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0]
            )
        )
        worker.start()
        worker.join()
        assert seen == [WAL_CHECKPOINT_PAGES]


def test_the_wal_stays_bounded_over_many_commits(tmp_path: Path) -> None:
    # Checkpoints still run: the WAL is copied back and reused from its start, so it does
    # not grow with the number of commits (a 4 KiB page plus a 24-byte frame header each).
    from stargraph.checkpoint._sqlite import WAL_CHECKPOINT_PAGES

    path = tmp_path / "runs.db"
    frame = 4096 + 24
    with SqliteStore(path) as store:
        _new_run(store)
        for step in range(1, 3 * WAL_CHECKPOINT_PAGES // 2):
            store.commit_step("r", StepRecord(step=step, writes=()))
        wal = Path(str(path) + "-wal").stat().st_size
        # Each commit writes ~3 pages, so ~4.5x the limit was written in all.
        assert 0 < wal <= (WAL_CHECKPOINT_PAGES + 16) * frame + 32
        assert store.get_run("r").last_step == 3 * WAL_CHECKPOINT_PAGES // 2 - 1


def test_now_is_the_iso_text_of_the_current_time() -> None:
    from datetime import UTC, datetime

    from stargraph.checkpoint._records import iso_now

    before = datetime.now(UTC)
    stamps = [iso_now() for _ in range(1000)]
    after = datetime.now(UTC)
    for stamp in stamps:
        parsed = datetime.fromisoformat(stamp)
        assert before.replace(microsecond=0) <= parsed <= after
        assert parsed.isoformat() == stamp  # the same text datetime.isoformat() writes
    assert stamps == sorted(stamps, key=datetime.fromisoformat)


def test_now_moves_on_across_a_second_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    # The text of the second is cached: a clock stepping over a second (or back) must get the
    # new second's text, the same as datetime.isoformat() of that instant.
    import time
    from datetime import UTC, datetime

    from stargraph.checkpoint import _records

    base = 1_700_000_000 * 1_000_000_000
    for ns in (base - 1_000, base, base + 999_999_000, base + 1_000_000_000, base - 5_000):
        monkeypatch.setattr(time, "time_ns", lambda ns=ns: ns)
        expected = datetime.fromtimestamp(ns // 1000 / 1_000_000, UTC).isoformat()
        assert _records.iso_now() == expected
