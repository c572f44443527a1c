"""What ``stargraph serve`` keeps beside the checkpoints: threads, API runs, their events.

Three tables in the run database (the SQLite file or the PostgreSQL schema the checkpoint
store uses), one SQL text for both engines (``?`` placeholders, turned into ``%s`` for
psycopg):

* ``serve_threads``: a thread the API created (its metadata); its turns are stargraph runs
  carrying its id, as ``runtime._threads`` describes.
* ``serve_runs``: one row per API run. An API run either *starts* a stargraph run (a new
  turn of its thread, whose run id is the API run's id) or *resumes* the interrupted run
  that ``target`` names with ``Command(resume=...)``. ``status`` is LangGraph's
  (``pending``, ``running``, ``success``, ``error``, ``interrupted``); a server claims a
  ``pending`` row, or a ``running`` one whose lease lapsed (its server died), with one
  compare-and-set ``UPDATE``, so any number of servers on one database share the rows.
* ``serve_events``: every item a run streamed, numbered from 0 per API run. The numbers are
  the SSE event ids: a client that reconnects with ``Last-Event-ID`` is sent what followed,
  from the table, whichever process ran the run. The primary key fences writers: a server
  whose lease was taken over cannot number an event twice.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from stargraph._sqlite import Database, Doing
from stargraph.errors import CheckpointError

__all__ = ["EventRow", "RunRow", "Tables", "ThreadRow", "open_tables"]

_TABLE: Final = re.compile(r"\b(serve_(?:threads|runs|events|store))\b")

ACTIVE: Final = ("pending", "running")
"""API run statuses of a run that has not ended."""


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """A thread the API created."""

    thread_id: str
    created_at: float
    updated_at: float
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunRow:
    """An API run. ``kind`` is ``start`` (``target`` is a new stargraph run, id ``run_id``)
    or ``resume`` (``target`` is the interrupted run it answers)."""

    run_id: str
    thread_id: str
    assistant_id: str
    kind: str
    target: str
    request: dict[str, Any]
    status: str
    owner: str | None
    attempts: int
    cancel: bool
    error: str | None
    metadata: dict[str, Any]
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class EventRow:
    """One streamed item of an API run: ``seq`` is its SSE id, ``data`` its JSON text."""

    seq: int
    event: str
    data: str


_RUN_COLUMNS: Final = (
    "run_id, thread_id, assistant_id, kind, target, request, status, owner, attempts, "
    "cancel, error, metadata, created_at, updated_at"
)


def _run(row: Sequence[Any]) -> RunRow:
    return RunRow(
        run_id=row[0],
        thread_id=row[1],
        assistant_id=row[2],
        kind=row[3],
        target=row[4],
        request=json.loads(row[5]),
        status=row[6],
        owner=row[7],
        attempts=int(row[8]),
        cancel=bool(row[9]),
        error=row[10],
        metadata=json.loads(row[11]),
        created_at=float(row[12]),
        updated_at=float(row[13]),
    )


def _thread(row: Sequence[Any]) -> ThreadRow:
    return ThreadRow(row[0], float(row[1]), float(row[2]), json.loads(row[3]))


def _ddl(float_type: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE IF NOT EXISTS serve_threads (
            thread_id TEXT PRIMARY KEY,
            created_at {float_type} NOT NULL,
            updated_at {float_type} NOT NULL,
            metadata TEXT NOT NULL
        )""",
        f"""CREATE TABLE IF NOT EXISTS serve_runs (
            run_id TEXT PRIMARY KEY,
            thread_id TEXT NOT NULL,
            assistant_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            target TEXT NOT NULL,
            request TEXT NOT NULL,
            status TEXT NOT NULL,
            owner TEXT,
            lease_expires {float_type},
            attempts INTEGER NOT NULL DEFAULT 0,
            cancel INTEGER NOT NULL DEFAULT 0,
            error TEXT,
            metadata TEXT NOT NULL,
            created_at {float_type} NOT NULL,
            updated_at {float_type} NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS serve_runs_thread ON serve_runs (thread_id, created_at)",
        "CREATE INDEX IF NOT EXISTS serve_runs_status ON serve_runs (status, created_at)",
        """CREATE TABLE IF NOT EXISTS serve_events (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            event TEXT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS serve_store (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            created_at {float_type} NOT NULL,
            updated_at {float_type} NOT NULL,
            PRIMARY KEY (namespace, key)
        )""".replace("{float_type}", float_type),
    )


class _Sql(Protocol):
    """One engine: statements with ``?`` placeholders."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int: ...

    def execute_many(self, sql: str, params: Sequence[Sequence[Any]]) -> None: ...

    def announce(self, run_id: str) -> None: ...

    def close(self) -> None: ...


class _SqliteSql:
    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        self._db = Database(path, fail=self._fail)
        with self._db.write() as conn:
            for sql in _ddl("REAL"):
                conn.execute(sql)

    def _fail(self, exc: BaseException, doing: Doing) -> BaseException:
        if isinstance(exc, sqlite3.IntegrityError):
            return exc
        if isinstance(exc, sqlite3.Error):
            return CheckpointError(f"serve tables in {self._path!r}: {exc} ({doing})")
        return exc

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        return list(self._db.rows(sql, params))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self._db.write() as conn:
            return conn.execute(sql, params).rowcount

    def execute_many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        with self._db.write() as conn:
            conn.executemany(sql, params)

    def announce(self, run_id: str) -> None:
        return None  # SQLite has no notices across processes: readers poll

    def close(self) -> None:
        self._db.close()


class _PostgresSql:
    def __init__(self, dsn: str, schema: str) -> None:
        from stargraph.checkpoint import PostgresStore

        # The store validates the DSN and schema and lends its connection pool, as the run
        # queue's does; the tables live in the store's schema.
        self._store = PostgresStore(dsn, schema=schema, pool_size=4)
        self._schema = schema
        self._announcing = threading.Condition()
        self._to_announce: set[str] = set()
        self._announcer: threading.Thread | None = None
        self._closing = False
        try:
            with self._store._conn() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sg:{schema}:serve",))
                conn.execute(f'SET LOCAL search_path TO "{schema}"')
                for sql in _ddl("DOUBLE PRECISION"):
                    conn.execute(sql)
        except BaseException:
            self._store.close()
            raise

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        with self._store._conn() as conn:
            yield conn

    def _pg(self, sql: str) -> str:
        # psycopg's placeholders, and the tables in the store's schema.
        return _TABLE.sub(f'"{self._schema}".\\1', sql.replace("?", "%s"))

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        with self._conn() as conn:
            return list(conn.execute(self._pg(sql), params).fetchall())

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self._conn() as conn:
            return int(conn.execute(self._pg(sql), params).rowcount)

    def execute_many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        with self._conn() as conn, conn.cursor() as cur:
            cur.executemany(self._pg(sql), params)

    def announce(self, run_id: str) -> None:
        # A notice is a commit of its own (a WAL flush: ~2 ms with fsync on, as long again
        # as storing the token). A thread of its own sends them, so a worker streaming a
        # model's reply never waits on one; those asked for while one is in flight go out
        # together next, each run's once, the last always.
        with self._announcing:
            self._to_announce.add(run_id)
            if self._announcer is None:
                self._announcer = threading.Thread(
                    target=self._announce_loop, name="stargraph-serve-announce", daemon=True
                )
                self._announcer.start()
            self._announcing.notify()

    def _announce_loop(self) -> None:
        while True:
            with self._announcing:
                while not self._to_announce and not self._closing:
                    self._announcing.wait()
                if not self._to_announce:
                    return  # closing, nothing left to send
                run_ids, self._to_announce = self._to_announce, set()
            for run_id in sorted(run_ids):
                with contextlib.suppress(CheckpointError):  # best effort, as every notice
                    self._store.announce(run_id)

    def close(self) -> None:
        with self._announcing:
            self._closing = True
            self._announcing.notify()
            announcer = self._announcer
        if announcer is not None:
            announcer.join(30)
        self._store.close()


def _is_duplicate(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it was raised from: the PostgreSQL store wraps psycopg's
    errors) is a primary key taken."""
    while exc is not None:
        if isinstance(exc, sqlite3.IntegrityError) or type(exc).__name__ == "UniqueViolation":
            return True
        exc = exc.__cause__
    return False


class Tables:
    """The serve tables on one database (see the module docstring). Thread safe."""

    def __init__(self, sql: _Sql) -> None:
        self._sql = sql
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- threads

    def create_thread(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRow | None:
        """Create a thread; ``None`` if one with that id exists."""
        now = time.time()
        try:
            self._sql.execute(
                "INSERT INTO serve_threads (thread_id, created_at, updated_at, metadata) "
                "VALUES (?, ?, ?, ?)",
                (thread_id, now, now, json.dumps(metadata)),
            )
        except Exception as exc:
            if _is_duplicate(exc):
                return None
            raise
        return ThreadRow(thread_id, now, now, metadata)

    def get_thread(self, thread_id: str) -> ThreadRow | None:
        """A thread, or ``None``."""
        rows = self._sql.rows(
            "SELECT thread_id, created_at, updated_at, metadata FROM serve_threads "
            "WHERE thread_id = ?",
            (thread_id,),
        )
        return _thread(rows[0]) if rows else None

    def update_thread(self, thread_id: str, metadata: dict[str, Any]) -> None:
        """Replace a thread's metadata and mark it updated."""
        self._sql.execute(
            "UPDATE serve_threads SET metadata = ?, updated_at = ? WHERE thread_id = ?",
            (json.dumps(metadata), time.time(), thread_id),
        )

    def delete_thread(self, thread_id: str) -> bool:
        """Forget a thread the API created (its stargraph runs stay in the store)."""
        return self._sql.execute("DELETE FROM serve_threads WHERE thread_id = ?", (thread_id,)) > 0

    def threads(self, *, limit: int, offset: int) -> list[ThreadRow]:
        """Threads, newest first."""
        rows = self._sql.rows(
            "SELECT thread_id, created_at, updated_at, metadata FROM serve_threads "
            "ORDER BY created_at DESC, thread_id LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [_thread(r) for r in rows]

    # ----------------------------------------------------------------- runs

    def add_run(self, run: RunRow, first_event: tuple[str, str]) -> None:
        """Store a new ``pending`` API run with its first event (``metadata``)."""
        self._sql.execute(
            f"INSERT INTO serve_runs ({_RUN_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.run_id,
                run.thread_id,
                run.assistant_id,
                run.kind,
                run.target,
                json.dumps(run.request),
                run.status,
                None,
                0,
                0,
                None,
                json.dumps(run.metadata),
                run.created_at,
                run.updated_at,
            ),
        )
        self.append_events(run.run_id, 0, [first_event])

    def get_run(self, run_id: str) -> RunRow | None:
        """An API run, or ``None``."""
        rows = self._sql.rows(f"SELECT {_RUN_COLUMNS} FROM serve_runs WHERE run_id = ?", (run_id,))
        return _run(rows[0]) if rows else None

    def runs(
        self, thread_id: str, *, limit: int, offset: int, status: str | None = None
    ) -> list[RunRow]:
        """The API runs of a thread, newest first."""
        where, params = "thread_id = ?", [thread_id]
        if status is not None:
            where, params = where + " AND status = ?", [*params, status]
        rows = self._sql.rows(
            f"SELECT {_RUN_COLUMNS} FROM serve_runs WHERE {where} "
            "ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [_run(r) for r in rows]

    def targets(self, thread_id: str) -> list[str]:
        """The stargraph runs the thread's API runs drive, in the order they were first
        driven."""
        rows = self._sql.rows(
            "SELECT target, MIN(created_at) AS first FROM serve_runs WHERE thread_id = ? "
            "GROUP BY target ORDER BY first",
            (thread_id,),
        )
        return [r[0] for r in rows]

    def active_run(self, thread_id: str) -> RunRow | None:
        """The thread's run that has not ended (a thread runs one at a time), or ``None``."""
        rows = self._sql.rows(
            f"SELECT {_RUN_COLUMNS} FROM serve_runs WHERE thread_id = ? "
            "AND status IN ('pending', 'running') ORDER BY created_at LIMIT 1",
            (thread_id,),
        )
        return _run(rows[0]) if rows else None

    def active_targeting(self, target: str) -> list[str]:
        """The API runs that have not ended and drive the stargraph run ``target``."""
        rows = self._sql.rows(
            "SELECT run_id FROM serve_runs WHERE target = ? "
            "AND status IN ('pending', 'running') ORDER BY created_at",
            (target,),
        )
        return [r[0] for r in rows]

    def announce(self, run_id: str) -> None:
        """Tell whoever watches the checkpoint store that stargraph run ``run_id`` streamed
        something (on PostgreSQL, a ``NOTIFY`` on the store's channel: a console open on
        the run wakes and reads its tokens; elsewhere nothing, readers poll)."""
        self._sql.announce(run_id)

    def claim(
        self, owner: str, lease_s: float, *, gone: Callable[[str | None], bool]
    ) -> RunRow | None:
        """Take the oldest ``pending`` run, or a ``running`` one whose lease lapsed or whose
        owner is ``gone`` (a dead process of this machine), under a lease of ``lease_s``
        seconds; ``None`` if there is none."""
        now = time.time()
        candidates = self._sql.rows(
            "SELECT run_id, status, owner, lease_expires FROM serve_runs "
            "WHERE status IN ('pending', 'running') ORDER BY created_at LIMIT 64"
        )
        for run_id, status, old, expires in candidates:
            # Compare-and-set on what was read: of several servers trying, one wins.
            params: tuple[Any, ...] = ()
            if status == "pending":
                check = "status = 'pending'"
            elif (expires is not None and float(expires) < now) or gone(old):
                check, params = "status = 'running' AND owner = ?", (old,)
            else:
                continue
            taken = self._sql.execute(
                "UPDATE serve_runs SET status = 'running', owner = ?, lease_expires = ?, "
                f"attempts = attempts + 1, updated_at = ? WHERE run_id = ? AND {check}",
                (owner, now + lease_s, now, run_id, *params),
            )
            if taken:
                return self.get_run(run_id)
        return None

    def renew(self, owner: str, lease_s: float) -> list[str]:
        """Extend the leases ``owner`` holds; the ids of its runs asked to cancel."""
        now = time.time()
        self._sql.execute(
            "UPDATE serve_runs SET lease_expires = ? WHERE owner = ? AND status = 'running'",
            (now + lease_s, owner),
        )
        rows = self._sql.rows(
            "SELECT run_id FROM serve_runs WHERE owner = ? AND status = 'running' AND cancel = 1",
            (owner,),
        )
        return [r[0] for r in rows]

    def finish(self, run_id: str, owner: str, status: str, error: str | None = None) -> bool:
        """Set the end status while ``owner`` holds the run; ``False`` if it lost it."""
        return (
            self._sql.execute(
                "UPDATE serve_runs SET status = ?, error = ?, lease_expires = NULL, "
                "updated_at = ? WHERE run_id = ? AND owner = ? AND status = 'running'",
                (status, error, time.time(), run_id, owner),
            )
            > 0
        )

    def cancel(self, run_id: str) -> str | None:
        """Ask a run to stop: a ``pending`` one ends ``interrupted`` at once, a ``running``
        one is flagged for its server. The status after, or ``None`` for no such run."""
        self._sql.execute(
            "UPDATE serve_runs SET status = 'interrupted', cancel = 1, updated_at = ?, "
            "error = 'cancelled before it started' WHERE run_id = ? AND status = 'pending'",
            (time.time(), run_id),
        )
        self._sql.execute(
            "UPDATE serve_runs SET cancel = 1 WHERE run_id = ? AND status = 'running'", (run_id,)
        )
        run = self.get_run(run_id)
        return None if run is None else run.status

    # ----------------------------------------------------------------- events

    def append_events(self, run_id: str, first: int, events: Sequence[tuple[str, str]]) -> None:
        """Store events numbered from ``first``; a number taken raises (a fenced writer)."""
        self._sql.execute_many(
            "INSERT INTO serve_events (run_id, seq, event, data) VALUES (?, ?, ?, ?)",
            [(run_id, first + i, event, data) for i, (event, data) in enumerate(events)],
        )

    def next_seq(self, run_id: str) -> int:
        """The number the run's next event takes."""
        rows = self._sql.rows("SELECT MAX(seq) FROM serve_events WHERE run_id = ?", (run_id,))
        return 0 if not rows or rows[0][0] is None else int(rows[0][0]) + 1

    def events_after(self, run_id: str, seq: int, *, limit: int = 500) -> list[EventRow]:
        """The run's events numbered above ``seq``, in order."""
        rows = self._sql.rows(
            "SELECT seq, event, data FROM serve_events WHERE run_id = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (run_id, seq, limit),
        )
        return [EventRow(int(r[0]), r[1], r[2]) for r in rows]

    # ----------------------------------------------------------------- store items

    def put_item(self, namespace: str, key: str, value: dict[str, Any]) -> None:
        """Create or replace a store item."""
        now = time.time()
        with self._lock:
            changed = self._sql.execute(
                "UPDATE serve_store SET value = ?, updated_at = ? WHERE namespace = ? AND key = ?",
                (json.dumps(value), now, namespace, key),
            )
            if not changed:
                self._sql.execute(
                    "INSERT INTO serve_store (namespace, key, value, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (namespace, key, json.dumps(value), now, now),
                )

    def get_item(self, namespace: str, key: str) -> tuple[dict[str, Any], float, float] | None:
        """A store item's value, created and updated times, or ``None``."""
        rows = self._sql.rows(
            "SELECT value, created_at, updated_at FROM serve_store WHERE namespace = ? AND key = ?",
            (namespace, key),
        )
        if not rows:
            return None
        return json.loads(rows[0][0]), float(rows[0][1]), float(rows[0][2])

    def delete_item(self, namespace: str, key: str) -> None:
        """Remove a store item (no error if absent)."""
        self._sql.execute(
            "DELETE FROM serve_store WHERE namespace = ? AND key = ?", (namespace, key)
        )

    def items(self) -> list[tuple[str, str, dict[str, Any], float, float]]:
        """Every store item: namespace, key, value, created and updated times."""
        rows = self._sql.rows(
            "SELECT namespace, key, value, created_at, updated_at FROM serve_store "
            "ORDER BY namespace, key"
        )
        return [(r[0], r[1], json.loads(r[2]), float(r[3]), float(r[4])) for r in rows]

    def close(self) -> None:
        """Close the connections."""
        self._sql.close()


def open_tables(db: str | Path, *, schema: str = "stargraph") -> Tables:
    """The serve tables in ``db``: a ``postgresql://`` DSN or a SQLite file."""
    if str(db).startswith(("postgresql://", "postgres://")):
        return Tables(_PostgresSql(str(db), schema))
    return Tables(_SqliteSql(db))
