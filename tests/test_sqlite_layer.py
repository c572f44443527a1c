"""The one SQLite layer (``stargraph._sqlite.Database``) and what moving every SQLite store
onto it fixed: a nested write joins its transaction, a lock held past the busy timeout goes
through the owner's typed error, ``":memory:"`` is one database for every thread, a closed
queue says so, and an agent's refused move leaves its task as it was."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from stargraph._sqlite import Database, Doing
from stargraph.agents import AgentProfile, AgentStore
from stargraph.errors import CheckpointError, LifecycleError
from stargraph.workers._queue import SqliteQueue


class Refused(Exception):
    """The owner's error in these tests."""


def test_a_nested_write_joins_the_outer_transaction(tmp_path: Path) -> None:
    db = Database(tmp_path / "t.db")
    with db.write() as conn:
        conn.execute("CREATE TABLE t (n INTEGER)")

    def write_then_fail() -> None:
        with db.write() as outer:
            outer.execute("INSERT INTO t VALUES (1)")
            with db.write() as inner:
                assert inner is outer
                assert db.writing
                inner.execute("INSERT INTO t VALUES (2)")
            raise RuntimeError("after the inner write: everything rolls back")

    with pytest.raises(RuntimeError):
        write_then_fail()
    assert db.rows("SELECT n FROM t") == []
    with db.write() as outer:
        with db.write() as inner:
            inner.execute("INSERT INTO t VALUES (3)")
        assert outer.in_transaction, "the inner write did not commit on its own"
    assert db.rows("SELECT n FROM t") == [(3,)]
    assert not db.writing
    db.close()


def test_a_lock_held_past_the_busy_timeout_goes_through_the_owner_hook(tmp_path: Path) -> None:
    seen: list[Doing] = []

    def fail(exc: BaseException, doing: Doing) -> BaseException:
        seen.append(doing)
        return Refused(f"{doing}: {exc}")

    path = tmp_path / "t.db"
    db = Database(path, busy_timeout_s=0.2, fail=fail)
    with db.write() as conn:
        conn.execute("CREATE TABLE t (n INTEGER)")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(Refused, match="locked: database is locked"), db.write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
    finally:
        other.execute("COMMIT")
        other.close()
    assert seen == ["locked"]
    with db.write() as conn:  # the lock is free again: the same database writes
        conn.execute("INSERT INTO t VALUES (1)")
    db.close()
    with pytest.raises(Refused, match="closed"):
        db.rows("SELECT n FROM t")


def test_memory_is_one_database_for_every_thread() -> None:
    db = Database(":memory:")
    with db.write() as conn:
        conn.execute("CREATE TABLE t (n INTEGER)")
        conn.execute("INSERT INTO t VALUES (7)")
    box: dict[str, object] = {}
    reader = threading.Thread(target=lambda: box.update(rows=db.rows("SELECT n FROM t")))
    reader.start()
    reader.join(30)
    assert box["rows"] == [(7,)]
    db.close()


def test_a_closed_sqlite_queue_is_a_typed_error_naming_its_file(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    queue = SqliteQueue(path)
    queue.submit("pkg.mod:graph", {"x": 1}, run_id="r")
    queue.close()
    with pytest.raises(CheckpointError, match=f"the queue on file {str(path)!r} is closed"):
        queue.get("r")


def test_a_refused_assign_leaves_the_agents_task_as_it_was(tmp_path: Path) -> None:
    profile = AgentProfile.model_validate({"agent_type": "coder"})
    with AgentStore(tmp_path / "agents.db") as store:
        agent = store.allocate(profile, task_id="t1")
        with pytest.raises(LifecycleError, match="PENDING -> BUSY"):
            store.assign(agent.id, "t2")
        assert store.get(agent.id).task_id == "t1"


def test_a_failed_write_rolls_back_maps_the_error_and_frees_the_lock(tmp_path: Path) -> None:
    seen: list[Doing] = []

    def fail(exc: BaseException, doing: Doing) -> BaseException:
        seen.append(doing)
        return Refused(str(exc))

    db = Database(tmp_path / "t.db", fail=fail)
    with db.write() as conn:
        conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY)")

    def insert_twice() -> None:
        with db.write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            conn.execute("INSERT INTO t VALUES (1)")  # the key again: IntegrityError

    with pytest.raises(Refused) as caught:
        insert_twice()
    assert seen == ["write"]
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert not db.writing
    assert db.rows("SELECT n FROM t") == []
    # The per-database lock was let go: another thread writes at once.
    done: list[bool] = []

    def other() -> None:
        with db.write() as conn:
            conn.execute("INSERT INTO t VALUES (2)")
        done.append(True)

    worker = threading.Thread(target=other)
    worker.start()
    worker.join(timeout=10)
    assert done == [True]
    assert db.rows("SELECT n FROM t") == [(2,)]
    db.close()


def test_issue23_only_the_layer_opens_sqlite_connections() -> None:
    import stargraph

    src = Path(stargraph.__file__).parent
    opening = {
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        if "sqlite3.connect(" in path.read_text(encoding="utf-8")
    }
    # Peeks at what a file holds (the CLI's "is this a store?", the console's "did a server
    # use this database?") go through the layer's read-only table_names too.
    assert opening == {"_sqlite.py"}


def test_table_names_peeks_read_only_and_never_makes_the_file(tmp_path: Path) -> None:
    from stargraph._sqlite import table_names

    missing = tmp_path / "missing.db"
    with pytest.raises(sqlite3.Error):
        table_names(missing)
    assert not missing.exists()
    db = Database(tmp_path / "store.db")
    with db.write() as conn:
        conn.execute("CREATE TABLE serve_events (seq INTEGER)")
    db.close()
    assert "serve_events" in table_names(tmp_path / "store.db")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database, just bytes" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        table_names(garbage)
