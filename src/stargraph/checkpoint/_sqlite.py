"""``SqliteStore``: the embedded ``CheckpointStore`` (stdlib ``sqlite3``, WAL, one file).

Layout (schema version 6, kept in ``meta.schema_version``; ``meta.database_id`` is the
file's random id, made with its schema)::

    runs     run_id PK, graph_name, graph_hash, code_hash, status, last_step,
             parent_run_id, parent_step, created_at, updated_at, extra (JSON or NULL:
             error / stopped_by / stop_reason / interrupt, only when set), lease_token, lease_owner
             (JSON RunOwner but its token), lease_expires (Unix seconds): the lease, NULL if
             free; thread_id, turn (NULL for a run outside a thread; unique together);
             incarnation (random, made by ``create_run``: a run deleted and created again
             has another)
    steps    (run_id, step) PK, has_snapshot, payload (JSON StepRecord, zstd-compressed
             from 1.5 KiB when that saves a tenth: such a payload starts with ``(``, or
             with ``x`` or ``H`` when written before, zlib-compressed), crc;
             append-only
    pending  (run_id, step, node, idx) PK, payload (JSON PendingWrite), crc
    journal  (run_id, step, node, idx, seq) PK, kind, key, payload (JSON JournalEntry), crc:
             the entries ``write_run`` writes in its transaction, and those of earlier
             versions; a running step's entries are appended to the run's file in the
             ``<file>-calls`` folder instead (``checkpoint._journal_files``), whose
             header names the database and the run's incarnation

Payloads are encoded by ``checkpoint._codec`` (the same bytes as ``PostgresStore``'s);
``crc`` is the CRC-32 of the payload, checked on every read (NULL in rows written by schema
1): a damaged row raises ``CorruptCheckpointError`` naming run and step instead of decoding
into other data.

Concurrency: the file is opened through ``stargraph._sqlite.Database``, the layer every
SQLite store shares: a connection per thread (WAL readers never block each other or the
writer), writes in ``BEGIN IMMEDIATE`` transactions queued in Python by a per-store lock,
and other processes on the same file waited for (``busy_timeout_s``), with the ``BEGIN``
retried with backoff until that timeout is spent.
Fencing: ``commit_step`` advances ``runs.last_step`` with a compare-and-set
(``... WHERE last_step = step - 1 AND lease_token IS owner``), so of two writers committing
the same step exactly one wins and the other gets a :class:`~stargraph.errors.CheckpointError`;
``set_status`` compares-and-sets on the lease token the same way.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from stargraph._sqlite import Database, Doing, is_locked
from stargraph.checkpoint._codec import crc as _crc
from stargraph.checkpoint._codec import decode
from stargraph.checkpoint._codec import encode as _encode
from stargraph.checkpoint._journal_files import JournalFiles
from stargraph.checkpoint._lease import owner_blob
from stargraph.checkpoint._node_cache import SqliteNodeCache
from stargraph.checkpoint._records import (
    ENDED_STATUSES,
    JournalEntry,
    PendingWrite,
    RunOwner,
    RunRecord,
    StepRecord,
    check_text,
    iso_now,
    turn_taken,
    unicode_problem,
)
from stargraph.checkpoint._sql import (
    RELEASE,
    RUN_COLUMNS,
    Commit,
    SqlStore,
    decode_run,
    may_acquire,
)
from stargraph.errors import (
    CheckpointError,
    CorruptCheckpointError,
    StoreUnavailableError,
)

__all__ = ["SCHEMA_VERSION", "WAL_CHECKPOINT_PAGES", "SqliteStore"]

SCHEMA_VERSION: Final = 6
"""The schema this code writes; older files are migrated when opened."""

WAL_CHECKPOINT_PAGES: Final = 4000
"""``PRAGMA wal_autocheckpoint`` of every connection: the WAL is copied back into the file
(two fsyncs, and every page written since the last time) when a commit leaves it this many
pages long (4 KiB pages: ~16 MiB). SQLite's default of 1,000 checkpoints every ~300 step
commits, and those checkpoints were most of a commit's mean cost; fewer, larger ones also
copy a page rewritten by many commits (the runs row's, an index's) once. Durability is the
same: a commit is in the WAL either way."""

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
    (
        # Journal files name the database and the run that wrote them, so that a folder of
        # them that outlived its database (or a run deleted and made again) is never read.
        "ALTER TABLE runs ADD COLUMN incarnation BLOB",
        "UPDATE runs SET incarnation = randomblob(16)",
        "INSERT OR IGNORE INTO meta (key, value) "
        "VALUES ('database_id', lower(hex(randomblob(16))))",
    ),
    (
        # Honest outcomes: a run stopped by a halt rule is 'halted', not 'done'. Before,
        # every rule that ended a run halted it and the run was stored 'done' with the rule
        # in stopped_by; such a run is now 'halted' as it would be if run today, except one
        # ended by termination/done, the shipped success rule, which stays 'done'. Its
        # reason was kept only with its last step's decision: stop_reason stays unset. No
        # DDL: the new statuses and stop_reason fit the columns, but an older stargraph
        # would misread them, so the version tells it to refuse the file.
        # CASE, not AND: only a done row's extra is read (another's may hold NaN, which
        # the JSON functions refuse).
        "UPDATE runs SET status = 'halted' WHERE CASE WHEN status = 'done' AND extra IS "
        "NOT NULL THEN coalesce(json_extract(CAST(extra AS TEXT), '$.stopped_by'), "
        "'termination/done') != 'termination/done' ELSE 0 END",
    ),
)


def _advance_sql(*, last: bool, extra: bool) -> str:
    """The compare-and-set of a step commit on ``last_step`` and the lease; ``last``: it
    also releases the lease (the run is done). Without ``extra`` the column is set NULL in
    the SQL itself: the sqlite3 module binds only int, float and str without looking for an
    adapter (for None, bytes and bool the lookup fails with an AttributeError it formats and
    drops, a few microseconds per parameter)."""
    value = "?" if extra else "NULL"
    release = RELEASE if last else ""
    return (
        f"UPDATE runs SET last_step = ?, status = ?, extra = {value}, updated_at = ?{release} "
        "WHERE run_id = ? AND last_step = ? AND lease_token IS ?"
    )


_ADVANCE: Final = {
    (last, extra): _advance_sql(last=last, extra=extra)
    for last in (False, True)
    for extra in (False, True)
}
"""The commit's compare-and-set, by (releases the lease, binds ``extra``)."""
_INSERT_STEP: Final = (
    "INSERT INTO steps (run_id, step, has_snapshot, payload, crc) VALUES (?, ?, ?, ?, ?)"
)
_INSERT_JOURNAL: Final = (
    "INSERT OR IGNORE INTO journal (run_id, step, node, idx, seq, kind, key, payload, crc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_REPLACE_JOURNAL: Final = _INSERT_JOURNAL.replace("OR IGNORE", "OR REPLACE", 1)
_DROP_PENDING: Final = "DELETE FROM pending WHERE run_id = ? AND step = ?"
_DROP_JOURNAL: Final = "DELETE FROM journal WHERE run_id = ? AND step = ?"
_READ_META: Final = "SELECT key, value FROM meta WHERE key IN ('schema_version', 'database_id')"

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


def _on_connect(conn: sqlite3.Connection) -> None:
    """Set up a new connection to the file (PRAGMAs kept per connection, not in the file)."""
    conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")


def _lease(expires: Any, row: Any) -> tuple[str, bool]:
    """A stored lease expiry (Unix seconds) as ISO text, and whether it lapsed."""
    at = float(expires)
    return datetime.fromtimestamp(at, UTC).isoformat(), at < time.time()


def _bad_text(exc: UnicodeEncodeError) -> CheckpointError:
    text = exc.object if isinstance(exc.object, str) else ""
    problem = unicode_problem(text) or str(exc)
    return CheckpointError(
        f"cannot store or look up {text!r}: {problem}; run ids, node names and other "
        "stored text must be valid Unicode (UTF-8), so use a plain string"
    )


class SqliteStore(SqlStore):
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

    _mark = "?"
    _select_runs = f"SELECT {RUN_COLUMNS} FROM runs"

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
        self._timeout = float(busy_timeout_s)
        self._where = self._runs_at = repr(str(self._path))
        self._db = Database(
            self._path,
            busy_timeout_s=self._timeout,
            synchronous=synchronous,
            foreign_keys=True,
            cached_statements=64,
            on_connect=_on_connect,
            fail=self._fail,
        )
        # Runs this store created (and has not seen taken over or stopped since), and the
        # steps it wrote pending writes, and journal rows, for: a step commit of such a run
        # deletes from each table only when it wrote some there (an agent's step journals its
        # calls but saves no pending write). Any other writer of the run needs its lease
        # (acquire), which this store's next commit then fails on anyway.
        self._fresh: set[str] = set()
        self._unclean_pending: set[tuple[str, int]] = set()
        self._unclean_journal: set[tuple[str, int]] = set()
        # The journal of a running step is appended to a file a run (see _journal_files),
        # not inserted as rows: a row cost a transaction of its own and a delete at commit.
        self._calls = JournalFiles(
            self._path.with_name(self._path.name + "-calls"), self._io, self._incarnation
        )
        # The incarnations of the runs this store created or appends the journal of while
        # it holds them (a resume): the runs row of such a run is read once, not at every
        # call (forgotten with the lease, like what _fresh assumes).
        self._incarnations: dict[str, bytes] = {}
        self._node_cache: SqliteNodeCache | None = None
        self.close_if_raises(self._setup)

    # ----------------------------------------------------------------- connections

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection."""
        return self._db.connection()

    def close(self) -> None:
        """Close every connection and file this store opened, in any thread. Safe to call
        twice."""
        self._db.close()
        self._calls.close()

    def node_cache(self) -> SqliteNodeCache:
        """The entries of cached nodes (feature ``node_cache``), in the file's
        ``stargraph_node_cache`` table (made on first use): shared by every graph, store
        object and process on the file."""
        if self._node_cache is None:
            self._node_cache = SqliteNodeCache(self._db)
        return self._node_cache

    def _io(self, exc: OSError, path: Path) -> CheckpointError:
        """The typed error for a journal file the system refused to write or read."""
        return StoreUnavailableError(
            f"journal file {str(path)!r} of checkpoint file {self._where}: {exc}; what was "
            "committed before is intact: free space on its disk or make its folder writable "
            "by this user, then resume the run"
        )

    def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction, committed on success, rolled back on error.
        Inside :meth:`write_run` (same thread), the statements join its transaction."""
        return self._db.write()

    def _fail(self, exc: BaseException, doing: Doing) -> BaseException:
        """The typed error for what the SQLite layer met (see ``stargraph._sqlite``)."""
        if isinstance(exc, UnicodeEncodeError):  # a lone surrogate in a bound string
            return _bad_text(exc)
        if doing == "closed":
            return CheckpointError(f"the SqliteStore on {self._where} is closed")
        if doing == "folder":
            return StoreUnavailableError(
                f"cannot create the directory of checkpoint file {self._where}: {exc}; "
                "create it, or pass a path in a folder this user can write"
            )
        if not isinstance(exc, sqlite3.Error):
            return exc
        if doing == "locked":
            return CheckpointError(
                f"checkpoint file {self._where} stayed locked for {self._timeout:g}s ({exc}); "
                "raise busy_timeout_s or find the process holding it"
            )
        if doing == "open":
            return self._unavailable(exc, "cannot open") or self._db_error(exc)
        if doing == "commit":
            return self._unavailable(exc, "cannot commit to") or CheckpointError(
                f"commit to checkpoint file {self._where} failed: {exc}"
            )
        return self._db_error(exc)

    def _query(self, sql: str, params: Sequence[object]) -> list[Any]:
        return self._db.rows(sql, params)

    _rows = _query

    def _batch(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self._write()

    def _decode_run(self, row: Sequence[Any]) -> RunRecord:
        return decode_run(row, lease=_lease, damaged="the checkpoint file is damaged")

    def _setup(self) -> None:
        conn = self._conn()
        try:
            meta = dict(conn.execute(_READ_META).fetchall())
            version = int(meta.get("schema_version", 0))
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc) and not is_locked(exc):
                raise self._db_error(exc) from exc
            version = 0
        except sqlite3.DatabaseError as exc:  # "file is not a database"
            raise self._db_error(exc) from exc
        if version > SCHEMA_VERSION:
            raise self._too_new(version)
        if version < SCHEMA_VERSION:
            self._migrate()
            meta = dict(conn.execute(_READ_META).fetchall())
        try:
            self._calls.database = bytes.fromhex(meta["database_id"])
        except (KeyError, TypeError, ValueError):
            raise CorruptCheckpointError(
                f"checkpoint file {self._where}: its meta table holds no valid database_id "
                f"(got {meta.get('database_id')!r}); the file is damaged: restore it from a "
                "backup"
            ) from None

    def _migrate(self) -> None:
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
            if version < SCHEMA_VERSION:
                # Before the schema is committed no run of this file can journal: whatever
                # the folder of its journals holds is of another database, or of a format
                # without the identities.
                self._calls.sweep()
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )

    def _too_new(self, version: int) -> CheckpointError:
        return CheckpointError(
            f"checkpoint file {self._where} has schema version {version}, newer than "
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
            f"{what} {self._where}: {exc}; what was committed before is intact (a "
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
        return cls(f"{where}checkpoint file {self._where}: {exc}", run_id=run_id)

    # ----------------------------------------------------------------- writes

    def create_run(self, run: RunRecord, first: StepRecord) -> None:
        """Insert a new run with its step 0, atomically. Raises if the run id exists.
        With ``run.owner`` set, the new run is leased to that owner."""
        rid = run.run_id
        check_text(rid, run_id=rid, graph_name=run.graph_name, parent_run_id=run.parent_run_id)
        payload, extra, at = self._new_run(run, first)
        owner = run.owner
        incarnation = os.urandom(16)
        with self._write() as conn:
            try:
                conn.execute(
                    f"INSERT INTO runs ({RUN_COLUMNS}, incarnation) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        rid,
                        run.graph_name,
                        run.graph_hash,
                        run.code_hash,
                        run.status,
                        first.step,
                        run.parent_run_id,
                        run.parent_step,
                        run.created_at or at,
                        at,
                        extra,
                        *self._lease_columns(owner),
                        run.thread_id,
                        run.turn,
                        incarnation,
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
        self._incarnations[rid] = incarnation
        self._fresh.add(rid)

    def _incarnation(self, run_id: str) -> bytes | None:
        """The run's incarnation (what its journal file's header names), or ``None`` when
        the database has no such run."""
        known = self._incarnations.get(run_id)
        if known is not None:
            return known
        rows = self._rows("SELECT incarnation FROM runs WHERE run_id = ?", (run_id,))
        return None if not rows else bytes(rows[0][0] or b"")

    @staticmethod
    def _lease_columns(owner: RunOwner | None) -> tuple[object, object, object]:
        if owner is None:
            return None, None, None
        return owner.token, owner_blob(owner), time.time() + owner.lease_s

    def acquire(self, run_id: str, owner: RunOwner, *, replace: str | None = None) -> RunRecord:
        """Lease the run to ``owner`` unless another live owner holds it; returns the run's
        record from just before."""
        self._forget(run_id)  # another owner may have left rows: commits delete them again
        with self._write() as conn:
            row = conn.execute(f"{self._select_runs} WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise self._missing(run_id)
            before = self._decode_run(row)
            expired = row[13] is not None and float(row[13]) < time.time()
            may_acquire(before, owner, replace=replace, expired=expired)
            conn.execute(
                "UPDATE runs SET lease_token = ?, lease_owner = ?, lease_expires = ? "
                "WHERE run_id = ?",
                (*self._lease_columns(owner), run_id),
            )
        return before

    _token_is = "lease_token IS ?"

    def _lease_until(self, lease_s: float) -> tuple[str, object]:
        return "?", time.time() + lease_s

    def _advance(self, run_id: str, number: int, commit: Commit) -> None:
        self._commit(run_id, number, commit, last=False)

    def _advance_last(self, run_id: str, number: int, commit: Commit) -> None:
        # The release of the lease is part of the compare-and-set itself: one statement.
        self._commit(run_id, number, commit, last=True)

    def _commit(self, run_id: str, number: int, commit: Commit, *, last: bool) -> None:
        status, extra, owner, snapshot, payload = commit
        # Compare-and-set on last_step and the lease: the fence between two writers.
        if extra is None:
            advance = _ADVANCE[last, False]
            params: tuple[object, ...] = (number, status, iso_now(), run_id, number - 1, owner)
        else:
            advance = _ADVANCE[last, True]
            params = (number, status, extra, iso_now(), run_id, number - 1, owner)
        # The same row as bytes and a bool would make, bound without the adapter lookup (see
        # _advance_sql): a bytearray is bound as the same BLOB, an int as the same INTEGER.
        step_row = (run_id, number, int(snapshot), bytearray(payload), _crc(payload))
        # Every statement on the thread's own cursor: none makes a cursor of its own.
        with self._db.write_cursor() as cursor:
            if cursor.execute(advance, params).rowcount != 1:
                raise self._fence_error(cursor.connection, run_id, owner, number)
            cursor.execute(_INSERT_STEP, step_row)
            # The common step of a run made here wrote neither: two statements saved.
            key = (run_id, number)
            fresh = run_id in self._fresh
            if not fresh or key in self._unclean_pending:
                cursor.execute(_DROP_PENDING, key)
            if not fresh or key in self._unclean_journal:
                cursor.execute(_DROP_JOURNAL, key)
        self._unclean_pending.discard(key)
        self._unclean_journal.discard(key)
        if not last:  # the last step's file goes when the run is released as done
            self._calls.committed(run_id, number, new=fresh)

    def _forget(self, run_id: str) -> None:
        """Stop assuming this store wrote every pending write and journal row of ``run_id``."""
        self._fresh.discard(run_id)
        self._incarnations.pop(run_id, None)
        self._calls.forget(run_id)
        # list() copies a set at once (other threads may add to it meanwhile).
        for unclean in (self._unclean_pending, self._unclean_journal):
            for key in [key for key in list(unclean) if key[0] == run_id]:
                unclean.discard(key)

    def _released(self, run_id: str, status: str) -> None:
        # A run this store made has a journal file only if it opened one (a chain that
        # records no call has none: its end costs no file system call).
        filed = run_id not in self._fresh or self._calls.holds(run_id)
        self._forget(run_id)  # whoever resumes it acquires it first
        if status in ENDED_STATUSES and filed:
            self._calls.finished(run_id)

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
        self._insert(
            self._unclean_pending,
            run_id,
            write.step,
            "INSERT OR IGNORE INTO pending (run_id, step, node, idx, payload, crc) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, write.step, write.node, write.index, payload, _crc(payload)),
        )

    def _insert(
        self,
        unclean: set[tuple[str, int]],
        run_id: str,
        step: int,
        sql: str,
        params: Sequence[object],
    ) -> None:
        """One ``INSERT`` committed by itself (SQLite's implicit transaction: one statement
        instead of ``BEGIN``, the insert and ``COMMIT``), or in the caller's transaction
        inside :meth:`write_run`. A row of an unknown run raises ``RunNotFoundError``.
        ``unclean`` is the table's set of steps that wrote rows to it."""
        unclean.add((run_id, step))  # first: the commit of that step must delete it
        try:
            self._db.run(sql, params)
        except CheckpointError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):  # the run's foreign key
                raise self._missing(run_id) from exc.__cause__
            raise

    def append_journal(self, run_id: str, entry: JournalEntry, *, replace: bool = False) -> None:
        """Record one call of a task execution (idempotent on its position: the first entry
        stays, unless ``replace``). It is appended to the run's journal file, except inside
        :meth:`write_run`, whose rows commit or roll back together."""
        payload = _encode(entry, run_id=run_id, step=entry.step)
        if not self._db.writing:
            new = run_id in self._fresh
            if not new and run_id not in self._incarnations:
                incarnation = self._incarnation(run_id)
                if incarnation is None:
                    raise self._missing(run_id)
                self._incarnations[run_id] = incarnation
            self._calls.append(run_id, entry.step, payload, replace=replace, new=new)
            return
        self._insert(
            self._unclean_journal,
            run_id,
            entry.step,
            _REPLACE_JOURNAL if replace else _INSERT_JOURNAL,
            (
                run_id,
                entry.step,
                entry.node,
                entry.index,
                entry.seq,
                entry.kind,
                entry.key,
                # Bound as the same BLOB as the bytes, without the adapter lookup (see _commit).
                bytearray(payload),
                _crc(payload),
            ),
        )

    # ----------------------------------------------------------------- reads

    def get_journal(self, run_id: str, step: int) -> list[JournalEntry]:
        """Journal entries of ``step``, ordered by ``(node, index, seq)``: those of its file
        and any rows (written by :meth:`write_run`, or by earlier versions)."""
        rows = super().get_journal(run_id, step)
        framed = self._calls.entries(run_id, step)
        if not framed:
            return rows
        entries = {(e.node, e.index, e.seq): e for e in rows}
        for replace, payload in framed:
            entry = decode(JournalEntry, payload, run_id=run_id, step=step, table="journal")
            position = (entry.node, entry.index, entry.seq)
            if replace or position not in entries:
                entries[position] = entry
        return [entries[position] for position in sorted(entries)]

    # ----------------------------------------------------------------- maintenance

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check``: ``"ok"`` for a sound file, else SQLite's findings."""
        rows = self._rows("PRAGMA integrity_check", ())
        return "\n".join(str(row[0]) for row in rows)

    def schema_version(self) -> int:
        """The schema version recorded in the file's ``meta`` table."""
        rows = self._rows("SELECT value FROM meta WHERE key = 'schema_version'", ())
        return int(rows[0][0]) if rows else 0
