"""The run queue: queued runs that worker processes claim under a lease.

One row per run: ``run_id``, ``graph_ref`` (``"module:attr"``), ``input`` (JSON),
``status`` (``queued`` / ``running`` / ``done`` / ``failed`` / ``interrupted`` / ``dead``),
``attempts`` (claims so far), ``max_attempts``, ``lease_owner``, ``lease_expires``,
``lease_token`` (a fencing token, bumped by every claim), ``reason`` (why a run failed or was
dead-lettered).

A claim takes a ``queued`` row, or a ``running`` row whose lease expired (its worker died),
and bumps ``attempts`` and ``lease_token``. A worker renews its lease with heartbeats and
finishes the row only while its token is still the row's token: a worker whose lease was
taken over can no longer touch the row. PostgreSQL claims with ``FOR UPDATE SKIP LOCKED``
and wakes idle workers with ``NOTIFY``; SQLite claims in a ``BEGIN IMMEDIATE`` transaction
(several processes on one machine, through the shared SQLite layer ``stargraph._sqlite``) and
idle workers poll.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import pydantic_core

from stargraph._sqlite import Database, Doing
from stargraph.errors import CheckpointError, RunNotFoundError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "Claim",
    "PostgresQueue",
    "QueueItem",
    "QueueStatus",
    "RunQueue",
    "SqliteQueue",
    "open_queue",
    "worker_name",
]

QueueStatus = Literal["queued", "running", "done", "failed", "interrupted", "dead"]
QUEUE_VERSION: Final = 1


def worker_name() -> str:
    """``host:pid:random``: identifies one worker in lease columns and messages."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class Claim:
    """A run this worker holds: the lease is valid while ``token`` is the row's token."""

    run_id: str
    graph_ref: str
    input: Any
    attempts: int
    max_attempts: int
    token: int


@dataclass(frozen=True, slots=True)
class QueueItem:
    """A queue row, as seen by :meth:`RunQueue.get`."""

    run_id: str
    graph_ref: str
    input: Any
    status: QueueStatus
    attempts: int
    max_attempts: int
    lease_owner: str | None
    lease_token: int
    reason: str | None


class RunQueue(Protocol):
    """What workers and ``submit`` need from a queue."""

    def submit(
        self, graph_ref: str, input: Any = None, *, run_id: str | None = None, max_attempts: int = 3
    ) -> str:
        """Queue a run; returns its id. Raises ``CheckpointError`` if the id is queued."""
        ...

    def claim(self, owner: str, lease_s: float) -> Claim | None:
        """Take the oldest claimable run under a lease, or ``None``."""
        ...

    def renew(self, claim: Claim, owner: str, lease_s: float) -> bool:
        """Extend the lease; ``False`` if it was lost (taken over by another worker)."""
        ...

    def finish(self, claim: Claim, status: QueueStatus, reason: str | None = None) -> bool:
        """Set the final status while the lease is held; ``False`` if it was lost."""
        ...

    def requeue(self, claim: Claim, reason: str | None = None) -> bool:
        """Hand a claimed run back (its worker is shutting down): queued again, at its old
        place, with this claim not counted as an attempt; ``False`` if the lease was lost."""
        ...

    def get(self, run_id: str) -> QueueItem:
        """A queue row; ``RunNotFoundError`` if the run was never queued."""
        ...

    def items(self) -> list[QueueItem]:
        """Every queue row, oldest first."""
        ...

    def wait(self, timeout_s: float) -> None:
        """Sleep until work may have arrived (a submit) or ``timeout_s`` passed."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


def _json(value: Any, run_id: str) -> bytes:
    try:
        return pydantic_core.to_json(value)
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"run {run_id!r}: the input cannot be queued as JSON ({exc})", run_id=run_id
        ) from exc


def _submission(graph_ref: str, input: Any, run_id: str | None) -> tuple[str, bytes]:
    """A checked submission's run id (a new one when none is given) and stored input."""
    _check_ref(graph_ref)
    run_id = run_id or uuid.uuid4().hex
    return run_id, _json(input if input is not None else {}, run_id)


def _check_ref(graph_ref: str) -> None:
    module, _, attr = graph_ref.partition(":")
    if not module or not attr:
        raise CheckpointError(
            f"graph reference {graph_ref!r} must be 'package.module:attribute' naming a Graph "
            "or a function returning one"
        )


# --------------------------------------------------------------------------- PostgreSQL

_PG_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE IF NOT EXISTS {s}.queue (
            run_id text PRIMARY KEY,
            graph_ref text NOT NULL,
            input bytea NOT NULL,
            status text NOT NULL DEFAULT 'queued',
            attempts integer NOT NULL DEFAULT 0,
            max_attempts integer NOT NULL,
            lease_owner text,
            lease_expires timestamptz,
            lease_token bigint NOT NULL DEFAULT 0,
            reason text,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
        )""",
        "CREATE INDEX IF NOT EXISTS queue_claimable ON {s}.queue (created_at, run_id) "
        "WHERE status IN ('queued', 'running')",
    ),
)

_PG_ITEM: Final = (
    "run_id, graph_ref, input, status, attempts, max_attempts, lease_owner, lease_token, reason"
)


def _claim(row: tuple[Any, ...]) -> Claim:
    """A claimed row (``run_id, graph_ref, input, attempts, max_attempts, lease_token``)."""
    return Claim(
        run_id=row[0],
        graph_ref=row[1],
        input=pydantic_core.from_json(bytes(row[2])),
        attempts=int(row[3]),
        max_attempts=int(row[4]),
        token=int(row[5]),
    )


def _item(row: tuple[Any, ...]) -> QueueItem:
    return QueueItem(
        run_id=row[0],
        graph_ref=row[1],
        input=pydantic_core.from_json(bytes(row[2])),
        status=row[3],
        attempts=int(row[4]),
        max_attempts=int(row[5]),
        lease_owner=row[6],
        lease_token=int(row[7]),
        reason=row[8],
    )


class PostgresQueue:
    """The run queue in ``<schema>.queue`` next to a ``PostgresStore``'s tables."""

    def __init__(self, dsn: str, *, schema: str = "stargraph") -> None:
        from stargraph.checkpoint import PostgresStore

        # The store validates the DSN and schema, migrates the checkpoint tables, and lends
        # its pool; the queue adds its table under the same advisory lock discipline.
        self._store = PostgresStore(dsn, schema=schema, pool_size=2)
        self._s = f'"{schema}"'
        self._channel = f"stargraph_queue_{schema}"
        self._listener: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        try:
            self._setup()
        except BaseException:
            self._store.close()
            raise

    @property
    def where(self) -> str:
        """The server, for messages."""
        return self._store.where

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        with self._store._conn() as conn:
            yield conn

    def _setup(self) -> None:
        from stargraph.checkpoint._postgres import migrate

        with self._conn() as conn:
            row = conn.execute(
                f"SELECT value FROM {self._s}.meta WHERE key = 'queue_version'"
            ).fetchone()
            if row is not None and int(row[0]) >= QUEUE_VERSION:
                return
            migrate(
                conn,
                self._s,
                key="queue_version",
                target=QUEUE_VERSION,
                migrations=_PG_MIGRATIONS,
                lock=f"sg:{self._s}:queue",
            )

    def submit(
        self, graph_ref: str, input: Any = None, *, run_id: str | None = None, max_attempts: int = 3
    ) -> str:
        """Queue a run and wake the workers; returns its id."""
        run_id, payload = _submission(graph_ref, input, run_id)
        with self._conn() as conn:
            row = conn.execute(
                f"WITH ins AS (INSERT INTO {self._s}.queue "
                "(run_id, graph_ref, input, max_attempts) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (run_id) DO NOTHING RETURNING run_id) "
                "SELECT (SELECT count(*) FROM ins), pg_notify(%s, '')",
                (run_id, graph_ref, payload, max_attempts, self._channel),
            ).fetchone()
        if row is None or row[0] != 1:
            raise CheckpointError(f"run {run_id!r} is already queued", run_id=run_id)
        return run_id

    def claim(self, owner: str, lease_s: float) -> Claim | None:
        """Take the oldest queued run, or a running one whose lease expired."""
        with self._conn() as conn:
            row = conn.execute(
                f"UPDATE {self._s}.queue SET status = 'running', attempts = attempts + 1, "
                "lease_owner = %s, lease_expires = clock_timestamp() + %s * interval '1 second', "
                "lease_token = lease_token + 1, updated_at = clock_timestamp() "
                f"WHERE run_id = (SELECT run_id FROM {self._s}.queue "
                "WHERE status = 'queued' OR (status = 'running' "
                "AND lease_expires < clock_timestamp()) "
                "ORDER BY created_at, run_id LIMIT 1 FOR UPDATE SKIP LOCKED) "
                "RETURNING run_id, graph_ref, input, attempts, max_attempts, lease_token",
                (owner, lease_s),
            ).fetchone()
        return None if row is None else _claim(row)

    def renew(self, claim: Claim, owner: str, lease_s: float) -> bool:
        """Extend the lease while ``claim.token`` is still the row's token."""
        with self._conn() as conn:
            cursor = conn.execute(
                f"UPDATE {self._s}.queue SET lease_expires = clock_timestamp() + "
                "%s * interval '1 second' "
                "WHERE run_id = %s AND lease_token = %s AND status = 'running'",
                (lease_s, claim.run_id, claim.token),
            )
            return cursor.rowcount == 1

    def finish(self, claim: Claim, status: QueueStatus, reason: str | None = None) -> bool:
        """Set the final status while the lease is held."""
        with self._conn() as conn:
            cursor = conn.execute(
                f"UPDATE {self._s}.queue SET status = %s, reason = %s, lease_expires = NULL, "
                "updated_at = clock_timestamp() "
                "WHERE run_id = %s AND lease_token = %s AND status = 'running'",
                (status, reason, claim.run_id, claim.token),
            )
            return cursor.rowcount == 1

    def requeue(self, claim: Claim, reason: str | None = None) -> bool:
        """Queue a claimed run again (this claim is not counted as an attempt)."""
        with self._conn() as conn:
            cursor = conn.execute(
                f"UPDATE {self._s}.queue SET status = 'queued', reason = %s, "
                "attempts = attempts - 1, lease_owner = NULL, lease_expires = NULL, "
                "updated_at = clock_timestamp() "
                "WHERE run_id = %s AND lease_token = %s AND status = 'running'",
                (reason, claim.run_id, claim.token),
            )
            notify = cursor.rowcount == 1
            if notify:
                conn.execute("SELECT pg_notify(%s, '')", (self._channel,))
            return notify

    def get(self, run_id: str) -> QueueItem:
        """A queue row."""
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT {_PG_ITEM} FROM {self._s}.queue WHERE run_id = %s", (run_id,)
            ).fetchone()
        if row is None:
            raise RunNotFoundError(f"run {run_id!r} was never queued", run_id=run_id)
        return _item(row)

    def items(self) -> list[QueueItem]:
        """Every queue row, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_PG_ITEM} FROM {self._s}.queue ORDER BY created_at, run_id"
            ).fetchall()
        return [_item(row) for row in rows]

    def wait(self, timeout_s: float) -> None:
        """Block on ``LISTEN`` until a submit notifies, or ``timeout_s`` passes (a server
        that cannot be reached just makes it sleep: the caller's next call reports it)."""
        with self._lock:
            if self._listener is None or self._listener.closed:
                try:
                    self._listener = self._store.connect()
                    self._listener.execute(f'LISTEN "{self._channel}"')
                except Exception:  # server down or restarting: no wake-ups until it is back
                    if self._listener is not None:
                        self._listener.close()
                    time.sleep(timeout_s)
                    return
            listener = self._listener
        try:
            for _ in listener.notifies(timeout=timeout_s, stop_after=1):
                pass
        except Exception:  # a dropped listener is re-opened by the next wait
            listener.close()

    def close(self) -> None:
        """Close the listener and the pool."""
        with self._lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
        self._store.close()


# --------------------------------------------------------------------------- SQLite

_SQLITE_TABLE: Final = """CREATE TABLE IF NOT EXISTS queue (
    run_id TEXT PRIMARY KEY,
    graph_ref TEXT NOT NULL,
    input BLOB NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued',
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    lease_owner TEXT,
    lease_expires REAL,
    lease_token INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    seq INTEGER NOT NULL,
    updated_at REAL NOT NULL
)"""


class SqliteQueue:
    """The run queue in the ``queue`` table of a ``SqliteStore`` file: several worker
    processes of one machine claim in ``BEGIN IMMEDIATE`` transactions; idle workers poll."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self._path = Path(path)
        self._db = Database(self._path, busy_timeout_s=busy_timeout_s, fail=self._fail)
        try:
            with self._db.write() as conn:
                conn.execute(_SQLITE_TABLE)
                conn.execute("CREATE INDEX IF NOT EXISTS queue_claimable ON queue (status, seq)")
        except BaseException:
            self.close()
            raise

    def _fail(self, exc: BaseException, doing: Doing) -> BaseException:
        """The queue's typed errors for what the SQLite layer met."""
        where = repr(str(self._path))
        if doing == "closed":
            return CheckpointError(f"the queue on file {where} is closed")
        if doing in ("folder", "open"):
            return CheckpointError(f"cannot open queue file {where}: {exc}")
        if isinstance(exc, sqlite3.Error):
            return CheckpointError(f"queue file {where}: {exc}")
        return exc

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._db.write()

    def submit(
        self, graph_ref: str, input: Any = None, *, run_id: str | None = None, max_attempts: int = 3
    ) -> str:
        """Queue a run; returns its id."""
        run_id, payload = _submission(graph_ref, input, run_id)
        with self._write() as conn:
            try:
                conn.execute(
                    "INSERT INTO queue (run_id, graph_ref, input, max_attempts, seq, updated_at) "
                    "VALUES (?, ?, ?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM queue), ?)",
                    (run_id, graph_ref, payload, max_attempts, time.time()),
                )
            except sqlite3.IntegrityError:
                raise CheckpointError(f"run {run_id!r} is already queued", run_id=run_id) from None
        return run_id

    def claim(self, owner: str, lease_s: float) -> Claim | None:
        """Take the oldest queued run, or a running one whose lease expired."""
        with self._write() as conn:
            now = time.time()
            row = conn.execute(
                "SELECT run_id FROM queue WHERE status = 'queued' "
                "OR (status = 'running' AND lease_expires < ?) ORDER BY seq LIMIT 1",
                (now,),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE queue SET status = 'running', attempts = attempts + 1, lease_owner = ?, "
                "lease_expires = ?, lease_token = lease_token + 1, updated_at = ? "
                "WHERE run_id = ?",
                (owner, now + lease_s, now, row[0]),
            )
            got = conn.execute(
                "SELECT run_id, graph_ref, input, attempts, max_attempts, lease_token "
                "FROM queue WHERE run_id = ?",
                (row[0],),
            ).fetchone()
        return _claim(got)

    def renew(self, claim: Claim, owner: str, lease_s: float) -> bool:
        """Extend the lease while ``claim.token`` is still the row's token."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE queue SET lease_expires = ? "
                "WHERE run_id = ? AND lease_token = ? AND status = 'running'",
                (time.time() + lease_s, claim.run_id, claim.token),
            )
            return cursor.rowcount == 1

    def finish(self, claim: Claim, status: QueueStatus, reason: str | None = None) -> bool:
        """Set the final status while the lease is held."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE queue SET status = ?, reason = ?, lease_expires = NULL, updated_at = ? "
                "WHERE run_id = ? AND lease_token = ? AND status = 'running'",
                (status, reason, time.time(), claim.run_id, claim.token),
            )
            return cursor.rowcount == 1

    def requeue(self, claim: Claim, reason: str | None = None) -> bool:
        """Queue a claimed run again (this claim is not counted as an attempt)."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE queue SET status = 'queued', reason = ?, attempts = attempts - 1, "
                "lease_owner = NULL, lease_expires = NULL, updated_at = ? "
                "WHERE run_id = ? AND lease_token = ? AND status = 'running'",
                (reason, time.time(), claim.run_id, claim.token),
            )
            return cursor.rowcount == 1

    def get(self, run_id: str) -> QueueItem:
        """A queue row."""
        rows = self._db.rows(f"SELECT {_PG_ITEM} FROM queue WHERE run_id = ?", (run_id,))
        if not rows:
            raise RunNotFoundError(f"run {run_id!r} was never queued", run_id=run_id)
        return _item(rows[0])

    def items(self) -> list[QueueItem]:
        """Every queue row, oldest first."""
        rows = self._db.rows(f"SELECT {_PG_ITEM} FROM queue ORDER BY seq")
        return [_item(row) for row in rows]

    def wait(self, timeout_s: float) -> None:
        """SQLite has no notifications: sleep a little (at most ``timeout_s``)."""
        time.sleep(min(timeout_s, 0.05))

    def close(self) -> None:
        """Close this process's connections."""
        self._db.close()


def is_postgres(db: str | Path) -> bool:
    """Whether ``db`` is a PostgreSQL connection string rather than a SQLite file."""
    text = str(db)
    return text.startswith(("postgresql://", "postgres://")) or (
        "=" in text and ("host=" in text or "dbname=" in text)
    )


def open_queue(db: str | Path, *, schema: str = "stargraph") -> RunQueue:
    """A ``PostgresQueue`` for a ``postgresql://`` DSN, else a ``SqliteQueue`` on the file."""
    if is_postgres(db):
        return PostgresQueue(str(db), schema=schema)
    return SqliteQueue(db)
