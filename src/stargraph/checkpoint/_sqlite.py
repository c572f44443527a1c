"""``SqliteStore``: the embedded ``CheckpointStore`` (stdlib ``sqlite3``, WAL, one file).

Layout (schema version 3, kept in ``meta.schema_version``)::

    runs     run_id PK, graph_name, graph_hash, code_hash, status, last_step,
             parent_run_id, parent_step, created_at, updated_at, extra (JSON or NULL:
             error / stopped_by / interrupt, only when set), lease_token, lease_owner
             (JSON RunOwner but its token), lease_expires (Unix seconds): the lease, NULL if
             free; thread_id, turn (NULL for a run outside a thread; unique together)
    steps    (run_id, step) PK, has_snapshot, payload (JSON StepRecord, zlib-compressed
             from 1 KiB when that saves a tenth: such a payload starts with ``H``, or
             ``x`` when written before), crc;
             append-only
    pending  (run_id, step, node, idx) PK, payload (JSON PendingWrite), crc
    journal  (run_id, step, node, idx, seq) PK, kind, key, payload (JSON JournalEntry), crc

Payloads are the records' JSON with default-valued fields left out (they come back on
decoding), which keeps a step of a plain chain under a hundred bytes. ``crc`` is the CRC-32
of the payload, checked on every read (NULL in rows written by schema 1): a damaged row
raises ``CorruptCheckpointError`` naming run and step instead of decoding into other data.

Concurrency: every thread gets its own connection (WAL readers never block each other or the
writer); writes run in ``BEGIN IMMEDIATE`` transactions, so a writer takes the write lock
up front instead of failing to upgrade a read lock, and a per-store lock queues this
process's writers in Python rather than in SQLite's sleeping busy handler. Other processes
on the same file wait in the busy handler (``busy_timeout_s``); if SQLite still reports
"database is locked", the ``BEGIN`` is retried with backoff until that timeout is spent.
Fencing: ``commit_step`` advances ``runs.last_step`` with a compare-and-set
(``... WHERE last_step = step - 1 AND lease_token IS owner``), so of two writers committing
the same step exactly one wins and the other gets a :class:`~stargraph.errors.CheckpointError`;
``set_status`` compares-and-sets on the lease token the same way.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, TypeVar

import pydantic_core
from pydantic import BaseModel, ValidationError

from stargraph.checkpoint._lease import (
    busy_error,
    effective_status,
    is_orphaned,
    lease_lost,
    owner_blob,
    owner_from,
)
from stargraph.checkpoint._records import (
    STORED_STATUSES,
    JournalEntry,
    PendingWrite,
    RunOwner,
    RunRecord,
    RunStatus,
    StepRecord,
    check_text,
    check_thread,
    clip_error,
    turn_taken,
    unicode_problem,
)
from stargraph.errors import (
    CheckpointError,
    CorruptCheckpointError,
    RunNotFoundError,
    StoreUnavailableError,
)

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

SCHEMA_VERSION: Final = 4
"""The schema this code writes; older files are migrated when opened."""

# Each migration takes the schema from version ``i`` to ``i + 1``; statements run one by one
# inside the opening transaction (DDL is transactional in SQLite), so a crash mid-migration
# leaves the previous version intact. Never edit a shipped migration: append a new one.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            graph_name TEXT NOT NULL,
            graph_hash TEXT NOT NULL,
            code_hash TEXT NOT NULL,
            status TEXT NOT NULL,
            last_step INTEGER NOT NULL,
            parent_run_id TEXT,
            parent_step INTEGER,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            extra BLOB
        )""",
        "CREATE INDEX runs_by_created ON runs (created_at, run_id)",
        # No index on status: every commit rewrites it, and an index entry to move would
        # cost the hot path a page; list_runs(status=...) filters the created_at scan.
        # Rowid tables, not WITHOUT ROWID: a WITHOUT ROWID row over ~1,000 bytes (a 4 KiB
        # page's local limit for index b-trees) spills into an overflow page of its own, so
        # 1 KiB steps took 4.5x their size on disk; a rowid table keeps rows up to ~4 KiB
        # inline, at the price of a (run_id, step) key index.
        """CREATE TABLE steps (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            has_snapshot INTEGER NOT NULL,
            payload BLOB NOT NULL,
            PRIMARY KEY (run_id, step)
        )""",
        """CREATE TABLE pending (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            node TEXT NOT NULL,
            idx INTEGER NOT NULL,
            payload BLOB NOT NULL,
            PRIMARY KEY (run_id, step, node, idx)
        )""",
        """CREATE TABLE journal (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            node TEXT NOT NULL,
            idx INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            payload BLOB NOT NULL,
            PRIMARY KEY (run_id, step, node, idx, seq)
        )""",
    ),
    (
        "ALTER TABLE runs ADD COLUMN lease_token TEXT",
        "ALTER TABLE runs ADD COLUMN lease_owner BLOB",
        "ALTER TABLE runs ADD COLUMN lease_expires REAL",
        "ALTER TABLE steps ADD COLUMN crc INTEGER",
        "ALTER TABLE pending ADD COLUMN crc INTEGER",
        "ALTER TABLE journal ADD COLUMN crc INTEGER",
    ),
    (
        # Threads: a run may be a turn of a thread. The unique index fences two callers
        # starting the same turn, and serves get_thread and list_threads; partial, so runs
        # outside threads cost it nothing.
        "ALTER TABLE runs ADD COLUMN thread_id TEXT",
        "ALTER TABLE runs ADD COLUMN turn INTEGER",
        "CREATE UNIQUE INDEX runs_by_thread ON runs (thread_id, turn) WHERE thread_id IS NOT NULL",
    ),
    (
        # Graphs: the IR every run's graph_hash names, once per hash, so a run made from
        # Python can be shown, resumed and replayed by any process that can import its code.
        "CREATE TABLE graphs (graph_hash TEXT PRIMARY KEY, ir BLOB NOT NULL)",
    ),
)

_RUN_COLUMNS: Final = (
    "run_id, graph_name, graph_hash, code_hash, status, last_step, parent_run_id, "
    "parent_step, created_at, updated_at, extra, lease_token, lease_owner, lease_expires, "
    "thread_id, turn"
)
_RUN_FIELDS: Final = (
    "run_id",
    "graph_name",
    "graph_hash",
    "code_hash",
    "status",
    "last_step",
    "parent_run_id",
    "parent_step",
    "created_at",
    "updated_at",
)
_EXTRA_FIELDS: Final = ("error", "stopped_by", "interrupt")

_ADVANCE: Final = (
    "UPDATE runs SET last_step = ?, status = ?, extra = ?, updated_at = ? "
    "WHERE run_id = ? AND last_step = ? AND lease_token IS ?"
)
_INSERT_STEP: Final = (
    "INSERT INTO steps (run_id, step, has_snapshot, payload, crc) VALUES (?, ?, ?, ?, ?)"
)
_DROP_PENDING: Final = "DELETE FROM pending WHERE run_id = ? AND step = ?"
_DROP_JOURNAL: Final = "DELETE FROM journal WHERE run_id = ? AND step = ?"

_STATUSES: Final = STORED_STATUSES

# SQLite's primary result codes for what the environment refuses, with the fix to name.
_UNAVAILABLE: Final = {
    sqlite3.SQLITE_FULL: "free space on its disk",
    sqlite3.SQLITE_READONLY: (
        "make the file and its folder writable by this user (SQLite also writes the -wal "
        "and -shm files beside it)"
    ),
    sqlite3.SQLITE_PERM: "make the file and its folder writable by this user",
    sqlite3.SQLITE_CANTOPEN: (
        "check that its folder exists and is writable by this user (SQLite creates the -wal "
        "and -shm files beside it)"
    ),
    sqlite3.SQLITE_IOERR: "check the disk and the file system it lives on",
}

_RecordT = TypeVar("_RecordT", bound=BaseModel)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


_PACK_FROM: Final = 1024
"""Step payloads from this many bytes are stored zlib-compressed when that saves a tenth."""


def _encode(record: BaseModel, *, run_id: str, step: int, pack: bool = False) -> bytes:
    # pydantic's serializer writes the same JSON as orjson, a little faster, and also takes
    # integers beyond 64 bits, which the in-memory store accepts too.
    try:
        payload = record.model_dump_json(exclude_defaults=True).encode()
        if pack and len(payload) >= _PACK_FROM:
            # An agent's step repeats what it read (a tool result is in the call's record,
            # in the state write and in the next request's delta): level 1 takes that out for
            # ~10 us per KiB-sized row. Rows under 1 KiB (a plain chain's) stay plain JSON.
            # A 4 KiB window: zlib.compress's default 32 KiB window and 64 KiB hash make it
            # set up ~400 KiB per call (~50 us, more than compressing a 2 KiB row), and a
            # step row is a few KiB, so a wider window finds nothing more.
            packer = zlib.compressobj(1, zlib.DEFLATED, 12, 4)
            packed = packer.compress(payload) + packer.flush()
            if len(packed) * 10 < len(payload) * 9:
                return packed
        return payload
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"run {run_id!r} step {step}: cannot store {type(record).__name__} as JSON "
            f"({exc}); node writes and journal values must be JSON data",
            run_id=run_id,
            step=step,
        ) from exc


def _encode_extra(
    error: str | None, stopped_by: str | None, interrupt: object, *, run_id: str
) -> bytes | None:
    if error is None and stopped_by is None and interrupt is None:
        return None
    extra = {"error": error, "stopped_by": stopped_by, "interrupt": interrupt}
    try:
        return pydantic_core.to_json({k: v for k, v in extra.items() if v is not None})
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"run {run_id!r}: cannot store the interrupt payload as JSON ({exc}); "
            "pass JSON data to ctx.interrupt()",
            run_id=run_id,
        ) from exc


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the row"
        return f"{where}: {first['msg']}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_PACKED: Final = (b"x", b"H")
"""The first byte of a zlib stream (its window size: ``x`` 32 KiB, written before, ``H``
4 KiB); JSON text starts with ``{``."""


def _crc(payload: bytes) -> int:
    """The checksum stored next to a payload (CRC-32: ~1 GB/s, so ~0.1 us for a small step;
    it detects damage, not deliberate edits)."""
    return zlib.crc32(payload)


def _decode(
    model: type[_RecordT],
    payload: object,
    *,
    run_id: str,
    step: int,
    table: str,
    crc: object = None,
) -> _RecordT:
    if crc is not None and isinstance(payload, bytes) and _crc(payload) != crc:
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step}: the {table} row fails its checksum (CRC-32 "
            f"{_crc(payload)} stored as {crc}); the checkpoint was damaged after it was "
            "written; fork the run from an earlier step",
            run_id=run_id,
            step=step,
        )
    try:
        if not isinstance(payload, bytes | str):
            raise TypeError(f"payload is {type(payload).__name__}, not JSON text")
        if isinstance(payload, bytes) and payload[:1] in _PACKED:
            payload = zlib.decompress(payload)
        record = model.model_validate_json(payload)
    except (ValidationError, TypeError, zlib.error) as exc:
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step}: the {table} row cannot be decoded as a "
            f"{model.__name__} ({_why(exc)}); the checkpoint file is damaged "
            "or was written by an incompatible version; fork the run from an earlier step",
            run_id=run_id,
            step=step,
        ) from exc
    if getattr(record, "step", step) != step:
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step}: the {table} row holds step "
            f"{getattr(record, 'step', None)}; the checkpoint file is damaged",
            run_id=run_id,
            step=step,
        )
    return record


def _decode_run(row: tuple[Any, ...]) -> RunRecord:
    run_id = str(row[0])
    step = row[5] if isinstance(row[5], int) else None
    try:
        data: dict[str, Any] = dict(zip(_RUN_FIELDS, row, strict=False))
        if row[10] is not None:
            extra = pydantic_core.from_json(row[10])
            if not isinstance(extra, dict) or not set(extra) <= set(_EXTRA_FIELDS):
                raise TypeError("the extra column is not an object of error/stopped_by/interrupt")
            data.update(extra)
        expired = False
        if row[12] is not None:
            owner = owner_from(str(row[11]), row[12])
            expires = float(row[13])
            expired = expires < time.time()
            data["owner"] = owner
            data["lease_expires"] = datetime.fromtimestamp(expires, UTC).isoformat()
        if row[14] is not None:
            data["thread_id"], data["turn"] = row[14], row[15]
        record = RunRecord.model_validate(data)
    except (ValueError, TypeError) as exc:  # ValidationError is a ValueError
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step}: the runs row cannot be decoded "
            f"({_why(exc)}); the checkpoint file is damaged",
            run_id=run_id,
            step=step,
        ) from exc
    status = effective_status(record.status, record.owner, expired=expired)
    return record if status == record.status else record.model_copy(update={"status": status})


def _bad_text(exc: UnicodeEncodeError) -> CheckpointError:
    text = exc.object if isinstance(exc.object, str) else ""
    problem = unicode_problem(text) or str(exc)
    return CheckpointError(
        f"cannot store or look up {text!r}: {problem}; run ids, node names and other "
        "stored text must be valid Unicode (UTF-8), so use a plain string"
    )


class SqliteStore:
    """A ``CheckpointStore`` in one SQLite file, safe across threads and processes.

    ``synchronous="NORMAL"`` (default) survives process crashes; a power loss may lose the
    last commits but never corrupts the file. ``"FULL"`` also survives power loss, at the
    price of an fsync per step. Use it as a context manager or call :meth:`close`.

    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with SqliteStore(pathlib.Path(tmp) / "runs.db") as store:
    ...         store.integrity_check()
    'ok'
    """

    def __init__(
        self,
        path: str | Path = ".stargraph/stargraph.db",
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout_s: float = 30.0,
    ) -> None:
        if str(path) == ":memory:" or str(path).startswith("file:"):
            raise CheckpointError(
                f"SqliteStore needs a file path, got {str(path)!r}; "
                "use MemoryStore for an in-memory store"
            )
        if synchronous not in ("NORMAL", "FULL"):
            raise CheckpointError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        self._path = Path(path)
        self._synchronous = synchronous
        self._timeout = float(busy_timeout_s)
        self._local = threading.local()
        # Every connection opened, by the thread that opened it, so close() reaches them all.
        self._conns: dict[threading.Thread, sqlite3.Connection] = {}
        self._conns_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        # Connections inherited through fork() must not be used (or closed) by the child;
        # they are parked here so the child never touches them.
        self._inherited: list[sqlite3.Connection] = []
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailableError(
                f"cannot create the directory of checkpoint file {str(self._path)!r}: {exc}; "
                "create it, or pass a path in a folder this user can write"
            ) from exc
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- connections

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise CheckpointError(f"the SqliteStore on {str(self._path)!r} is closed")
        if os.getpid() != self._pid:
            self._after_fork()
        try:
            conn: sqlite3.Connection = self._local.conn
        except AttributeError:
            conn = self._open()
        return conn

    def _after_fork(self) -> None:
        with self._conns_lock:
            self._inherited.extend(self._conns.values())
            self._conns = {}
            self._local = threading.local()
            self._pid = os.getpid()

    def _open(self) -> sqlite3.Connection:
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
            # check_same_thread=False: close() may run on another thread.
            conn = sqlite3.connect(
                self._path,
                timeout=self._timeout,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=64,
            )
        except sqlite3.Error as exc:
            unavailable = self._unavailable(exc, "cannot open")
            if unavailable is not None:
                raise unavailable from exc
            raise CheckpointError(
                f"cannot open checkpoint file {str(self._path)!r}: {exc}"
            ) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        except sqlite3.Error as exc:
            conn.close()
            raise (self._unavailable(exc, "cannot open") or self._db_error(exc)) from exc
        except BaseException:
            conn.close()
            raise
        me = threading.current_thread()
        with self._conns_lock:
            if self._closed:
                conn.close()
                raise CheckpointError(f"the SqliteStore on {str(self._path)!r} is closed")
            # Connections of threads that have ended would otherwise pile up until close().
            for thread in [t for t in self._conns if not t.is_alive()]:
                self._conns.pop(thread).close()
            self._conns[me] = conn
        self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close every connection this store opened, in any thread. Safe to call twice."""
        with self._conns_lock:
            self._closed = True
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _retry(self, conn: sqlite3.Connection, sql: str) -> None:
        """Run ``sql`` (a BEGIN or a PRAGMA), retrying while another process holds the lock."""
        deadline = time.monotonic() + self._timeout
        delay = 0.001
        while True:
            try:
                conn.execute(sql)
                return
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc):
                    raise self._db_error(exc) from exc
                if time.monotonic() >= deadline:
                    raise CheckpointError(
                        f"checkpoint file {str(self._path)!r} stayed locked for "
                        f"{self._timeout:g}s ({exc}); raise busy_timeout_s or find the "
                        "process holding it"
                    ) from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.1)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction, committed on success, rolled back on error.
        Inside :meth:`write_run` (same thread), the statements join its transaction."""
        batch = getattr(self._local, "batch", None)
        if batch is not None:
            yield batch
            return
        conn = self._conn()
        with self._write_lock:
            self._retry(conn, "BEGIN IMMEDIATE")
            try:
                yield conn
            except sqlite3.Error as exc:  # disk full, I/O error ...: typed, and rolled back
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise self._db_error(exc) from exc
            except UnicodeEncodeError as exc:  # a lone surrogate in a bound string
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise _bad_text(exc) from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                # WAL mode writes at COMMIT: a full disk or an I/O error shows up here.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                unavailable = self._unavailable(exc, "cannot commit to")
                if unavailable is not None:
                    raise unavailable from exc
                raise CheckpointError(
                    f"commit to checkpoint file {str(self._path)!r} failed: {exc}"
                ) from exc

    def _setup(self) -> None:
        conn = self._conn()
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc) and not _is_locked(exc):
                raise self._db_error(exc) from exc
            version = 0
        except sqlite3.DatabaseError as exc:  # "file is not a database"
            raise self._db_error(exc) from exc
        if version > SCHEMA_VERSION:
            raise self._too_new(version)
        mode = ""
        deadline = time.monotonic() + self._timeout
        while mode != "wal":
            # Switching to WAL needs a moment of exclusive access: retry while others open.
            try:
                mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc) or time.monotonic() >= deadline:
                    raise self._db_error(exc) from exc
                time.sleep(0.005 * (0.5 + random.random()))
                continue
            if mode != "wal":
                raise CheckpointError(
                    f"checkpoint file {str(self._path)!r} cannot use WAL mode (got {mode!r}); "
                    "put it on a local file system"
                )
        if version == SCHEMA_VERSION:
            return
        with self._write() as conn:
            # Another process may have migrated between our read and our write lock.
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise self._too_new(version)
            for statements in _MIGRATIONS[version:]:
                for sql in statements:
                    conn.execute(sql)
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )

    def _too_new(self, version: int) -> CheckpointError:
        return CheckpointError(
            f"checkpoint file {str(self._path)!r} has schema version {version}, newer than "
            f"the {SCHEMA_VERSION} this stargraph understands; upgrade stargraph"
        )

    def _unavailable(self, exc: sqlite3.Error, doing: str = "") -> StoreUnavailableError | None:
        """A typed error for what the environment refused (a full disk, a read-only file or
        folder, an I/O error, a file that cannot be opened), or ``None``. Nothing of the
        refused write is stored, and what was committed before stays intact."""
        code = getattr(exc, "sqlite_errorcode", None)
        fix = _UNAVAILABLE.get(-1 if code is None else code & 0xFF)
        if fix is None:
            return None
        what = f"{doing} checkpoint file" if doing else "checkpoint file"
        return StoreUnavailableError(
            f"{what} {str(self._path)!r}: {exc}; what was committed before is intact (a "
            f"refused write stores nothing): {fix}, then resume the run"
        )

    def _db_error(self, exc: sqlite3.Error, run_id: str | None = None) -> CheckpointError:
        unavailable = self._unavailable(exc)
        if unavailable is not None:
            return unavailable
        where = f"run {run_id!r} in " if run_id else ""
        cls = (
            CorruptCheckpointError
            if isinstance(exc, sqlite3.DatabaseError)
            and ("not a database" in str(exc) or "malformed" in str(exc))
            else CheckpointError
        )
        return cls(
            f"{where}checkpoint file {str(self._path)!r}: {exc}",
            run_id=run_id,
        )

    def _missing(self, run_id: str) -> RunNotFoundError:
        return RunNotFoundError(
            f"no run {run_id!r} in {str(self._path)!r}; list runs with store.list_runs()",
            run_id=run_id,
        )

    def _check_exists(self, run_id: str) -> None:
        if not self._rows("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)):
            raise self._missing(run_id)

    def _check_status(self, run_id: str, status: str) -> None:
        if status not in _STATUSES:
            raise CheckpointError(
                f"run {run_id!r}: unknown status {status!r}; use one of {sorted(_STATUSES)}",
                run_id=run_id,
            )

    # ----------------------------------------------------------------- writes

    def create_run(self, run: RunRecord, first: StepRecord) -> None:
        """Insert a new run with its step 0, atomically. Raises if the run id exists.
        With ``run.owner`` set, the new run is leased to that owner."""
        rid = run.run_id
        check_text(rid, run_id=rid, graph_name=run.graph_name, parent_run_id=run.parent_run_id)
        self._check_status(rid, run.status)
        check_thread(run)
        payload = _encode(first, run_id=rid, step=first.step, pack=True)
        extra = _encode_extra(clip_error(run.error), run.stopped_by, run.interrupt, run_id=rid)
        owner = run.owner
        now = _now()
        with self._write() as conn:
            try:
                conn.execute(
                    f"INSERT INTO runs ({_RUN_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        rid,
                        run.graph_name,
                        run.graph_hash,
                        run.code_hash,
                        run.status,
                        first.step,
                        run.parent_run_id,
                        run.parent_step,
                        run.created_at or now,
                        now,
                        extra,
                        *self._lease_columns(owner),
                        run.thread_id,
                        run.turn,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                if "thread_id" in str(exc):
                    holder = conn.execute(
                        "SELECT run_id FROM runs WHERE thread_id = ? AND turn = ?",
                        (run.thread_id, run.turn),
                    ).fetchone()
                    raise turn_taken(run, None if holder is None else holder[0]) from exc
                raise CheckpointError(
                    f"run {rid!r} already exists; pick another run_id or resume it",
                    run_id=rid,
                ) from exc
            conn.execute(
                _INSERT_STEP,
                (rid, first.step, first.snapshot is not None, payload, _crc(payload)),
            )

    def write_run(
        self,
        run: RunRecord,
        steps: Sequence[StepRecord],
        *,
        pending: Sequence[PendingWrite] = (),
        journal: Sequence[JournalEntry] = (),
        graph: tuple[str, bytes] | None = None,
    ) -> None:
        """Insert a whole run - its record as it ended, every step from 0, the pending writes
        and journal of its unfinished step, and ``graph`` (its hash and IR, as
        :meth:`put_graph` keeps them) - in one transaction, without a lease: what a run kept
        in memory (``durability="exit"``) writes when it stops. Raises like
        :meth:`create_run` if the run id exists; nothing is written then."""
        rid = run.run_id
        if not steps:
            raise CheckpointError(f"run {rid!r}: write_run needs at least step 0", run_id=rid)
        start = run.model_copy(
            update={
                "status": "running",
                "last_step": steps[0].step,
                "error": None,
                "stopped_by": None,
                "interrupt": None,
                "owner": None,
                "lease_expires": None,
            }
        )
        with self._write() as conn:
            # The methods below run inside this transaction (see _write): one commit, and
            # every row written exactly as those methods write it.
            self._local.batch = conn
            try:
                if graph is not None:
                    self.put_graph(*graph)
                self.create_run(start, steps[0])
                for step in steps[1:]:
                    self.commit_step(rid, step)
                for write in pending:
                    self.put_pending(rid, write)
                for entry in journal:
                    self.append_journal(rid, entry)
                self.set_status(
                    rid,
                    run.status,
                    error=run.error,
                    stopped_by=run.stopped_by,
                    interrupt=run.interrupt,
                )
            finally:
                self._local.batch = None

    @staticmethod
    def _lease_columns(owner: RunOwner | None) -> tuple[object, object, object]:
        if owner is None:
            return None, None, None
        return owner.token, owner_blob(owner), time.time() + owner.lease_s

    def _fence_error(
        self, conn: sqlite3.Connection, run_id: str, owner: str | None, step: int | None
    ) -> CheckpointError:
        """Why a compare-and-set on ``(last_step, lease_token)`` matched no row."""
        row = conn.execute(
            "SELECT last_step, lease_token, lease_owner FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            return self._missing(run_id)
        if step is not None and row[0] != step - 1:
            return CheckpointError(
                f"run {run_id!r}: step {step} cannot follow committed step "
                f"{row[0]}; another writer owns this run, or history was forked",
                run_id=run_id,
                step=step,
            )
        holder = None if row[2] is None else owner_from(str(row[1]), row[2])
        return lease_lost(run_id, owner, holder)

    def acquire(self, run_id: str, owner: RunOwner, *, replace: str | None = None) -> RunRecord:
        """Lease the run to ``owner`` unless another live owner holds it; returns the run's
        record from just before."""
        with self._write() as conn:
            row = conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                raise self._missing(run_id)
            before = _decode_run(row)
            held = before.owner
            if (
                held is not None
                and held.token not in (replace, owner.token)
                and before.status != "orphaned"
                and not is_orphaned(held, expired=float(row[13]) < time.time())
            ):
                raise busy_error(run_id, held, before.lease_expires)
            conn.execute(
                "UPDATE runs SET lease_token = ?, lease_owner = ?, lease_expires = ? "
                "WHERE run_id = ?",
                (*self._lease_columns(owner), run_id),
            )
        return before

    def heartbeat(self, run_id: str, owner: RunOwner) -> bool:
        """Renew ``owner``'s lease; ``False`` if it is not the run's lease any more."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET lease_expires = ? WHERE run_id = ? AND lease_token = ?",
                (time.time() + owner.lease_s, run_id, owner.token),
            )
            return cursor.rowcount == 1

    def release(self, run_id: str, token: str) -> None:
        """Give up the lease ``token`` without changing the status."""
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET lease_token = NULL, lease_owner = NULL, lease_expires = NULL "
                "WHERE run_id = ? AND lease_token = ?",
                (run_id, token),
            )

    def commit_step(
        self,
        run_id: str,
        step: StepRecord,
        *,
        status: RunStatus = "running",
        error: str | None = None,
        stopped_by: str | None = None,
        interrupt: object = None,
        owner: str | None = None,
    ) -> None:
        """In one transaction: append ``step`` (must be ``last_step + 1``), set the run's
        ``last_step``/status fields, and drop the pending writes and journal of that step.
        Fenced on ``owner`` (the lease token; the lease itself is kept)."""
        self._check_status(run_id, status)
        number = step.step
        payload = _encode(step, run_id=run_id, step=number, pack=True)
        extra = _encode_extra(clip_error(error), stopped_by, interrupt, run_id=run_id)
        with self._write() as conn:
            # Compare-and-set on last_step and the lease: the fence between two writers.
            cursor = conn.execute(
                _ADVANCE, (number, status, extra, _now(), run_id, number - 1, owner)
            )
            if cursor.rowcount != 1:
                raise self._fence_error(conn, run_id, owner, number)
            conn.execute(
                _INSERT_STEP,
                (run_id, number, step.snapshot is not None, payload, _crc(payload)),
            )
            conn.execute(_DROP_PENDING, (run_id, number))
            conn.execute(_DROP_JOURNAL, (run_id, number))

    def set_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        error: str | None = None,
        stopped_by: str | None = None,
        interrupt: object = None,
        owner: str | None = None,
    ) -> None:
        """Change a run's status without committing a step (park, fail, finish). Fenced on
        ``owner``; any status but ``running`` also releases the lease."""
        self._check_status(run_id, status)
        extra = _encode_extra(clip_error(error), stopped_by, interrupt, run_id=run_id)
        release = (
            ""
            if status == "running"
            else ", lease_token = NULL, lease_owner = NULL, lease_expires = NULL"
        )
        with self._write() as conn:
            cursor = conn.execute(
                f"UPDATE runs SET status = ?, extra = ?, updated_at = ?{release} "
                "WHERE run_id = ? AND lease_token IS ?",
                (status, extra, _now(), run_id, owner),
            )
            if cursor.rowcount != 1:
                raise self._fence_error(conn, run_id, owner, None)

    def set_graph(self, run_id: str, *, graph_hash: str, code_hash: str) -> None:
        """Record that the run continues under another graph (after an explicit migration)."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET graph_hash = ?, code_hash = ?, updated_at = ? WHERE run_id = ?",
                (graph_hash, code_hash, _now(), run_id),
            )
            if cursor.rowcount != 1:
                raise self._missing(run_id)

    def put_graph(self, graph_hash: str, ir: bytes) -> None:
        """Keep a graph's IR by its hash (the first copy stays)."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO graphs (graph_hash, ir) VALUES (?, ?)", (graph_hash, ir)
            )

    def get_graph(self, graph_hash: str) -> bytes | None:
        """The IR kept for ``graph_hash``, or ``None``."""
        rows = self._rows("SELECT ir FROM graphs WHERE graph_hash = ?", (graph_hash,))
        return bytes(rows[0][0]) if rows else None

    def put_pending(self, run_id: str, write: PendingWrite) -> None:
        """Save one finished task's writes for a step not yet committed (idempotent)."""
        payload = _encode(write, run_id=run_id, step=write.step)
        with self._write() as conn:
            try:
                conn.execute(
                    "INSERT OR IGNORE INTO pending (run_id, step, node, idx, payload, crc) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (run_id, write.step, write.node, write.index, payload, _crc(payload)),
                )
            except sqlite3.IntegrityError as exc:  # the foreign key: no such run
                raise self._missing(run_id) from exc

    def append_journal(self, run_id: str, entry: JournalEntry, *, replace: bool = False) -> None:
        """Record one call of a task execution (idempotent on its position: the first entry
        stays, unless ``replace``)."""
        payload = _encode(entry, run_id=run_id, step=entry.step)
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self._write() as conn:
            try:
                conn.execute(
                    f"{verb} INTO journal "
                    "(run_id, step, node, idx, seq, kind, key, payload, crc) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        entry.step,
                        entry.node,
                        entry.index,
                        entry.seq,
                        entry.kind,
                        entry.key,
                        payload,
                        _crc(payload),
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise self._missing(run_id) from exc

    # ----------------------------------------------------------------- reads

    def _rows(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        conn = self._conn()
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                return conn.execute(sql, params).fetchall()
            except UnicodeEncodeError as exc:
                raise _bad_text(exc) from exc
            except sqlite3.OperationalError as exc:
                # WAL readers do not wait on writers; "locked" here means WAL recovery by
                # another process, which is brief.
                if not _is_locked(exc) or time.monotonic() >= deadline:
                    raise self._db_error(exc) from exc
                time.sleep(0.002)
            except sqlite3.DatabaseError as exc:
                raise self._db_error(exc) from exc

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record; ``RunNotFoundError`` if there is none."""
        rows = self._rows(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise self._missing(run_id)
        return _decode_run(rows[0])

    def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by status."""
        if status is None:
            rows = self._rows(
                f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY created_at DESC, run_id DESC LIMIT ?",
                (limit,),
            )
        elif status in ("running", "orphaned"):
            # Stored as running; which of them are orphaned is known only once decoded.
            rows = self._rows(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE status = 'running' "
                "ORDER BY created_at DESC, run_id DESC",
                (),
            )
            runs = [_decode_run(row) for row in rows]
            return [r for r in runs if r.status == status][:limit]
        else:
            rows = self._rows(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE status = ? "
                "ORDER BY created_at DESC, run_id DESC LIMIT ?",
                (status, limit),
            )
        return [_decode_run(row) for row in rows]

    def get_thread(self, thread_id: str) -> list[RunRecord]:
        """The runs of thread ``thread_id`` in turn order (empty for an unknown thread)."""
        rows = self._rows(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE thread_id = ? ORDER BY turn", (thread_id,)
        )
        return [_decode_run(row) for row in rows]

    def list_threads(self, *, limit: int = 100) -> list[RunRecord]:
        """The latest turn of each thread, newest first."""
        rows = self._rows(
            f"SELECT {_RUN_COLUMNS} FROM runs AS r WHERE thread_id IS NOT NULL AND turn = "
            "(SELECT MAX(turn) FROM runs WHERE thread_id = r.thread_id) "
            "ORDER BY created_at DESC, run_id DESC LIMIT ?",
            (limit,),
        )
        return [_decode_run(row) for row in rows]

    def get_steps(self, run_id: str, *, start: int = 0, end: int | None = None) -> list[StepRecord]:
        """Committed steps ``start..end`` (inclusive) in order."""
        rows = self._rows(
            "SELECT step, payload, crc FROM steps WHERE run_id = ? AND step >= ? AND step <= ? "
            "ORDER BY step",
            (run_id, start, end if end is not None else 2**63 - 1),
        )
        if not rows:
            self._check_exists(run_id)  # an unknown run, or else just an empty range
        return [
            _decode(StepRecord, payload, run_id=run_id, step=step, table="steps", crc=crc)
            for step, payload, crc in rows
        ]

    def snapshot_step(self, run_id: str, at_or_before: int) -> int:
        """The newest step ``<= at_or_before`` that holds a full snapshot (0 always does)."""
        rows = self._rows(
            "SELECT MAX(step) FROM steps WHERE run_id = ? AND step <= ? AND has_snapshot",
            (run_id, at_or_before),
        )
        found = rows[0][0]
        if found is None:
            self._check_exists(run_id)
            return 0
        return int(found)

    def get_pending(self, run_id: str, step: int) -> list[PendingWrite]:
        """Pending writes saved for ``step``, ordered by ``(node, index)``."""
        rows = self._rows(
            "SELECT payload, crc FROM pending WHERE run_id = ? AND step = ? ORDER BY node, idx",
            (run_id, step),
        )
        return [
            _decode(PendingWrite, payload, run_id=run_id, step=step, table="pending", crc=crc)
            for payload, crc in rows
        ]

    def get_journal(self, run_id: str, step: int) -> list[JournalEntry]:
        """Journal entries of ``step``, ordered by ``(node, index, seq)``."""
        rows = self._rows(
            "SELECT payload, crc FROM journal WHERE run_id = ? AND step = ? "
            "ORDER BY node, idx, seq",
            (run_id, step),
        )
        return [
            _decode(JournalEntry, payload, run_id=run_id, step=step, table="journal", crc=crc)
            for payload, crc in rows
        ]

    # ----------------------------------------------------------------- maintenance

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check``: ``"ok"`` for a sound file, else SQLite's findings."""
        rows = self._rows("PRAGMA integrity_check", ())
        return "\n".join(str(row[0]) for row in rows)

    def schema_version(self) -> int:
        """The schema version recorded in the file's ``meta`` table."""
        rows = self._rows("SELECT value FROM meta WHERE key = 'schema_version'", ())
        return int(rows[0][0]) if rows else 0
