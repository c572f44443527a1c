"""``SqliteStore`` specifics: file layout, WAL, schema versions, corruption, processes, size."""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import string
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph.checkpoint import (
    JournalEntry,
    MemoryStore,
    PendingWrite,
    SqliteStore,
    StepRecord,
    WriteRecord,
)
from stargraph.checkpoint._sqlite import SCHEMA_VERSION
from stargraph.checkpoint.conformance import make_run, make_step
from stargraph.errors import CheckpointError, CorruptCheckpointError, RunNotFoundError


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
def store(db: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(db)
    yield store
    store.close()


@contextlib.contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection, as another program would open the file."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        yield conn
    finally:
        conn.close()


def _fill(store: SqliteStore, run_id: str, steps: int = 3) -> None:
    store.create_run(make_run(run_id), make_step(0))
    for k in range(1, steps + 1):
        store.commit_step(run_id, make_step(k, snapshot=k == 2))


# --------------------------------------------------------------------------- the file


def test_default_path_is_dot_stargraph_under_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with SqliteStore() as store:
        assert store.path == Path(".stargraph/stargraph.db")
        _fill(store, "r1")
    assert (tmp_path / ".stargraph" / "stargraph.db").is_file()
    with SqliteStore(tmp_path / ".stargraph" / "stargraph.db") as again:
        assert again.get_run("r1").last_step == 3


def test_creates_missing_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c.db"
    with SqliteStore(str(path)) as store:
        assert store.path == path
    assert path.is_file()


def test_wal_mode_and_pragmas(store: SqliteStore, db: Path) -> None:
    with raw(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn = store._conn()
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000


def test_full_synchronous_and_custom_busy_timeout(db: Path) -> None:
    with SqliteStore(db, synchronous="FULL", busy_timeout_s=2.5) as store:
        conn = store._conn()
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 2_500


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="MemoryStore"):
        SqliteStore(":memory:")
    with pytest.raises(CheckpointError, match="OFF"):
        SqliteStore(tmp_path / "x.db", synchronous="OFF")  # type: ignore[arg-type]


def test_reopen_after_close_sees_everything(db: Path) -> None:
    with SqliteStore(db) as store:
        _fill(store, "r1", steps=5)
        store.set_status("r1", "interrupted", interrupt={"ask": "approve?"})
        store.create_run(make_run("r2", parent_run_id="r1", parent_step=2), make_step(0))
        store.put_pending("r1", PendingWrite(step=6, node="a", writes={"x": 1}))
        store.append_journal("r1", JournalEntry(step=6, node="a", seq=0, kind="clock", value=1.5))
        before = (
            store.list_runs(),
            store.get_steps("r1"),
            store.get_pending("r1", 6),
            store.get_journal("r1", 6),
        )
    with SqliteStore(db) as store:
        after = (
            store.list_runs(),
            store.get_steps("r1"),
            store.get_pending("r1", 6),
            store.get_journal("r1", 6),
        )
        assert after == before
        assert store.snapshot_step("r1", 5) == 2
        store.commit_step("r1", make_step(6))
        assert store.get_pending("r1", 6) == []


def test_closed_store_refuses_work_and_close_is_idempotent(db: Path) -> None:
    store = SqliteStore(db)
    store.close()
    store.close()
    with pytest.raises(CheckpointError, match="closed"):
        store.get_run("r1")


def test_close_closes_connections_of_every_thread(store: SqliteStore) -> None:
    _fill(store, "r1")
    opened: list[sqlite3.Connection] = []
    release = threading.Event()

    def reader() -> None:
        store.get_run("r1")
        opened.append(store._conn())
        release.wait(10)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    while len(opened) < 3:
        time.sleep(0.001)
    assert len(set(map(id, opened))) == 3, "one connection per thread"
    store.close()
    release.set()
    for t in threads:
        t.join()
    for conn in opened:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")


def test_connections_of_finished_threads_are_released(store: SqliteStore) -> None:
    _fill(store, "r1")
    for _ in range(10):
        t = threading.Thread(target=store.get_run, args=("r1",))
        t.start()
        t.join()
    store.get_run("r1")
    assert len(store._db._conns) <= 2, "dead threads' connections are closed on the next open"


def test_integrity_check(store: SqliteStore) -> None:
    _fill(store, "r1")
    assert store.integrity_check() == "ok"


def test_not_a_database_is_a_corrupt_checkpoint_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 1000)
    with pytest.raises(CorruptCheckpointError, match=r"junk\.db"):
        SqliteStore(path)


# --------------------------------------------------------------------------- schema


def test_schema_version_recorded_and_reopen_is_idempotent(db: Path) -> None:
    with SqliteStore(db) as store:
        _fill(store, "r1")
        assert store.schema_version() == SCHEMA_VERSION
    with raw(db) as conn:
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    for _ in range(3):
        with SqliteStore(db) as store:
            assert store.schema_version() == SCHEMA_VERSION
            assert store.get_run("r1").last_step == 3
    with raw(db) as conn:
        assert conn.execute(
            "SELECT type, name, sql FROM sqlite_master ORDER BY name"
        ).fetchall() == (schema)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"meta", "runs", "steps", "pending", "journal"} <= tables


def test_an_existing_empty_database_is_migrated(db: Path) -> None:
    with raw(db) as conn:
        conn.execute("CREATE TABLE unrelated (x)")
    with SqliteStore(db) as store:
        assert store.schema_version() == SCHEMA_VERSION
        _fill(store, "r1")


def test_a_newer_schema_is_refused(db: Path) -> None:
    SqliteStore(db).close()
    with raw(db) as conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(CheckpointError, match=r"schema version 999.*upgrade stargraph"):
        SqliteStore(db)


def test_concurrent_first_opens_migrate_once(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def opener(i: int) -> None:
        try:
            barrier.wait()
            with SqliteStore(path) as store:
                _fill(store, f"r{i}", steps=2)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with SqliteStore(path) as store:
        assert len(store.list_runs()) == 8


# --------------------------------------------------------------------------- corruption


@pytest.mark.parametrize(
    "garbage",
    [b"\x00\xff not json", b'{"step": 2, "writes": "not a list"}', b"[]", b'{"step": 99}', 12345],
)
def test_corrupt_step_row_names_run_step_and_table(
    store: SqliteStore, db: Path, garbage: object
) -> None:
    _fill(store, "bad")
    _fill(store, "good")
    with raw(db) as conn:
        conn.execute("UPDATE steps SET payload = ? WHERE run_id = 'bad' AND step = 2", (garbage,))
    with pytest.raises(CorruptCheckpointError, match=r"run 'bad' step 2: the steps row") as info:
        store.get_steps("bad")
    assert (info.value.run_id, info.value.step) == ("bad", 2)
    assert isinstance(info.value, CheckpointError)
    # The rest of that run, and every other run, stay readable.
    assert [s.step for s in store.get_steps("bad", end=1)] == [0, 1]
    assert [s.step for s in store.get_steps("bad", start=3)] == [3]
    assert store.get_run("bad").last_step == 3
    assert store.get_steps("good") == [make_step(k, snapshot=k == 2) for k in range(4)]
    store.commit_step("good", make_step(4))
    store.commit_step("bad", make_step(4))  # appending past the damage still works


def test_corrupt_pending_and_journal_rows(store: SqliteStore, db: Path) -> None:
    _fill(store, "bad")
    _fill(store, "good")
    for run_id in ("bad", "good"):
        store.put_pending(run_id, PendingWrite(step=4, node="a", writes={}))
        with store._write():
            # Inside a transaction (write_run's), the entry is a row of the journal table.
            store.append_journal(run_id, JournalEntry(step=4, node="a", seq=0, kind="k"))
    with raw(db) as conn:
        conn.execute("UPDATE pending SET payload = x'00ff' WHERE run_id = 'bad'")
        conn.execute("UPDATE journal SET payload = '{\"nope\": 1}' WHERE run_id = 'bad'")
    with pytest.raises(CorruptCheckpointError, match=r"run 'bad' step 4: the pending row"):
        store.get_pending("bad", 4)
    with pytest.raises(CorruptCheckpointError, match=r"run 'bad' step 4: the journal row"):
        store.get_journal("bad", 4)
    assert len(store.get_pending("good", 4)) == 1
    assert len(store.get_journal("good", 4)) == 1


@pytest.mark.parametrize(
    ("column", "garbage"),
    [("extra", b"\xff{"), ("extra", b'{"surprise": 1}'), ("status", "exploded")],
)
def test_corrupt_run_row(store: SqliteStore, db: Path, column: str, garbage: object) -> None:
    _fill(store, "bad")
    _fill(store, "good")
    with raw(db) as conn:
        conn.execute(f"UPDATE runs SET {column} = ? WHERE run_id = 'bad'", (garbage,))
    with pytest.raises(CorruptCheckpointError, match=r"run 'bad' step 3: the runs row") as info:
        store.get_run("bad")
    assert (info.value.run_id, info.value.step) == ("bad", 3)
    assert store.get_run("good").last_step == 3


def test_unknown_run_message_names_the_file(store: SqliteStore, db: Path) -> None:
    with pytest.raises(RunNotFoundError, match=r"no run 'nope' in .*runs\.db"):
        store.get_run("nope")


def test_non_json_payload_is_a_checkpoint_error_naming_run_and_step(store: SqliteStore) -> None:
    _fill(store, "r1")
    step = StepRecord(step=4, writes=(WriteRecord(node="a", writes={"f": object()}),))
    with pytest.raises(CheckpointError, match=r"run 'r1' step 4: cannot store StepRecord"):
        store.commit_step("r1", step)
    assert store.get_run("r1").last_step == 3


def test_unknown_status_is_refused_before_anything_is_written(store: SqliteStore) -> None:
    _fill(store, "r1")
    with pytest.raises(CheckpointError, match=r"unknown status 'finished'"):
        store.commit_step("r1", make_step(4), status="finished")  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match=r"unknown status 'paused'"):
        store.set_status("r1", "paused")  # type: ignore[arg-type]
    assert store.get_run("r1").last_step == 3


def test_corrupt_message_says_what_is_wrong(store: SqliteStore, db: Path) -> None:
    _fill(store, "r1")
    with raw(db) as conn:
        conn.execute('UPDATE steps SET payload = \'{"step": 1, "writes": 5}\' WHERE step = 1')
    with pytest.raises(CorruptCheckpointError, match=r"StepRecord \(writes: Input should be"):
        store.get_steps("r1")


# --------------------------------------------------------------------------- concurrency


def test_two_stores_on_one_file_are_fenced(db: Path) -> None:
    """Two processes' stores (here two instances) both try to commit step 1: one wins."""
    with SqliteStore(db) as a, SqliteStore(db) as b:
        a.create_run(make_run("r1"), make_step(0))
        a.commit_step("r1", make_step(1))
        with pytest.raises(CheckpointError, match="cannot follow committed step 1"):
            b.commit_step("r1", make_step(1, snapshot=True))
        assert b.get_steps("r1") == [make_step(0), make_step(1)]


def test_waits_for_another_writer_then_commits(store: SqliteStore, db: Path) -> None:
    _fill(store, "r1")
    with raw(db) as conn:
        conn.execute("BEGIN IMMEDIATE")
        timer = threading.Timer(0.3, conn.execute, args=("COMMIT",))
        timer.start()
        started = time.monotonic()
        store.commit_step("r1", make_step(4))
        assert time.monotonic() - started >= 0.2
        timer.join()
    assert store.get_run("r1").last_step == 4


def test_a_lock_held_past_the_busy_timeout_is_a_checkpoint_error(db: Path) -> None:
    with SqliteStore(db, busy_timeout_s=0.2) as store:
        _fill(store, "r1")
        with raw(db) as conn:
            conn.execute("BEGIN IMMEDIATE")
            with pytest.raises(CheckpointError, match=r"stayed locked for 0\.2s"):
                store.commit_step("r1", make_step(4))
            conn.execute("COMMIT")
        assert store.get_run("r1").last_step == 3
        store.commit_step("r1", make_step(4))


def test_a_forked_child_opens_its_own_connections(store: SqliteStore) -> None:
    _fill(store, "parent")
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            store.create_run(make_run("child"), make_step(0))
            store.commit_step("child", make_step(1))
            store.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.commit_step("parent", make_step(4))
    assert store.get_run("child").last_step == 1
    assert store.integrity_check() == "ok"


_WORKER = textwrap.dedent(
    """
    import sys, threading
    from stargraph.checkpoint import PendingWrite, SqliteStore
    from stargraph.checkpoint.conformance import make_run, make_step

    path, proc, threads, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    errors = []

    def work(store, run_id):
        try:
            store.create_run(make_run(run_id), make_step(0))
            for k in range(1, steps + 1):
                if k % 7 == 0:
                    store.put_pending(run_id, PendingWrite(step=k, node="a", writes={"k": k}))
                store.commit_step(run_id, make_step(k, snapshot=k % 10 == 0))
                store.get_steps(run_id, start=k)
            store.set_status(run_id, "done")
        except BaseException as exc:
            errors.append(repr(exc))

    with SqliteStore(path) as store:
        workers = [
            threading.Thread(target=work, args=(store, f"p{proc}-t{t}")) for t in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    if errors:
        print("\\n".join(errors), file=sys.stderr)
        sys.exit(1)
    """
)


@pytest.mark.slow
def test_four_processes_times_five_threads_on_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    procs, threads, steps = 4, 5, 50
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), str(p), str(threads), str(steps)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(procs)
    ]
    failures = []
    for child in children:
        _, err = child.communicate(timeout=120)
        if child.returncode != 0:
            failures.append(err)
        assert "locked" not in err
    assert failures == []
    with SqliteStore(path) as store:
        assert store.integrity_check() == "ok"
        runs = store.list_runs(limit=1000)
        assert len(runs) == procs * threads
        assert {r.status for r in runs} == {"done"}
        for run in runs:
            assert run.last_step == steps
            assert [s.step for s in store.get_steps(run.run_id)] == list(range(steps + 1))
            assert store.get_pending(run.run_id, 7) == []


# --------------------------------------------------------------------------- size


def test_bytes_on_disk_are_proportional_to_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "size.db"
    # Text that compresses little, so that the rows (not the fixed pages of the schema's
    # tables and indexes) are what the file holds.
    rng = random.Random(7)
    steps = 400
    with SqliteStore(path) as store:
        store.create_run(make_run("r1"), make_step(0))
        for k in range(1, steps + 1):
            blob = "".join(rng.choices(string.ascii_letters + string.digits, k=1000))
            store.commit_step(
                "r1", StepRecord(step=k, writes=(WriteRecord(node="n", writes={"b": blob}),))
            )
        # What was written: the stored payloads (a large one is stored compressed).
        rows = store._rows("SELECT SUM(LENGTH(payload)) FROM steps", ())
        written = int(rows[0][0])
    # The last connection's close checkpoints the WAL into the main file and removes it.
    assert not path.with_name("size.db-wal").exists()
    size = path.stat().st_size
    assert written <= size <= 1.5 * written + 64 * 1024, (size, written)

    with SqliteStore(path) as store:
        for k in range(steps + 1, 2 * steps + 1):
            store.commit_step(
                "r1", StepRecord(step=k, writes=(WriteRecord(node="n", writes={"b": blob}),))
            )
    grown = path.stat().st_size - size
    assert 0.8 * written <= grown <= 1.5 * written, (grown, written)


def test_a_small_step_costs_about_its_payload(tmp_path: Path) -> None:
    """Records leave default fields out, so a chain step is stored in about 100 bytes."""
    path = tmp_path / "small.db"
    with SqliteStore(path) as store:
        store.create_run(make_run("r1"), make_step(0))
        base = None
        for k in range(1, 2001):
            store.commit_step("r1", make_step(k))
            if k == 1000:
                store.close()
                base = path.stat().st_size
                store = SqliteStore(path)  # noqa: PLW2901 - reopened on purpose
    assert base is not None
    per_step = (path.stat().st_size - base) / 1000
    assert per_step < 200, per_step


# --------------------------------------------------------------------------- round trips

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(writes=st.dictionaries(st.text(max_size=10), _json, max_size=4), value=_json)
def test_json_values_round_trip_like_the_memory_store(writes: dict[str, Any], value: Any) -> None:
    step = StepRecord(
        step=1,
        writes=(WriteRecord(node="n", writes=writes),),
        snapshot={"v": value},
        facts=value,
    )
    pending = PendingWrite(step=2, node="n", writes=writes)
    entry = JournalEntry(step=2, node="n", seq=0, kind="k", value=value)
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for store in (MemoryStore(), SqliteStore(Path(tmp) / "rt.db")):
            try:
                store.create_run(make_run("r"), make_step(0))
                store.commit_step("r", step, status="interrupted", interrupt=value)
                store.put_pending("r", pending)
                store.append_journal("r", entry)
                results.append(
                    (
                        store.get_steps("r", start=1),
                        store.get_run("r").interrupt,
                        store.get_pending("r", 2),
                        store.get_journal("r", 2),
                    )
                )
            finally:
                store.close()
    assert results[0] == results[1] == ([step], value, [pending], [entry])


def test_issue23_a_store_whose_setup_fails_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store that cannot set its file up must not keep the connection it opened.
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database file " * 200)
    closed: list[SqliteStore] = []
    close = SqliteStore.close

    def spy(store: SqliteStore) -> None:
        closed.append(store)
        close(store)

    monkeypatch.setattr(SqliteStore, "close", spy)
    with pytest.raises(CheckpointError, match=r"junk\.db"):
        SqliteStore(path)
    assert len(closed) == 1
