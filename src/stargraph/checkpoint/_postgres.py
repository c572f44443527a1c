"""``PostgresStore``: the ``CheckpointStore`` on PostgreSQL (psycopg 3, extra ``postgres``).

Layout (schema version 5, kept in ``<schema>.meta``; everything lives in its own schema,
``stargraph`` by default)::

    runs     run_id PK, graph_name, graph_hash, code_hash, status, last_step,
             parent_run_id, parent_step, created_at, updated_at, extra (JSON or NULL),
             lease_token, lease_owner (JSON RunOwner but its token), lease_expires (server
             clock), thread_id, turn (NULL outside a thread; unique together)
    steps    (run_id, step) PK, has_snapshot, payload (JSON StepRecord, compressed as in
             ``SqliteStore``), crc; append-only
    pending  (run_id, step, node, idx) PK, payload (JSON PendingWrite), crc
    journal  (run_id, step, node, idx, seq) PK, kind, key, payload (JSON JournalEntry), crc

Caller-given strings (run ids, node names, graph names, times) are ``bytea`` holding UTF-8:
PostgreSQL ``text`` cannot hold NUL, which run ids and node names may contain, and ``bytea``
orders byte-wise, i.e. by code point like Python and SQLite. Payloads are the same JSON as
SQLite's. Migrations are versioned and applied under a transaction-scoped advisory lock,
so several processes opening a fresh database at once migrate it exactly once.

Fencing: ``commit_step`` is one statement whose ``UPDATE runs ... WHERE last_step = step - 1
AND lease_token IS NOT DISTINCT FROM owner`` gates the step insert and the pending/journal
cleanup, so of two writers committing the same step exactly one wins and the other gets a
:class:`~stargraph.errors.CheckpointError`. Leases expire on the server's clock, so hosts
with skewed clocks agree on when a lease lapsed. ``crc`` is the CRC-32 of the payload, checked
on every read, as in SQLite.

Change notices: each write that changes what a run looks like (a new run, a step committed, a
status change) is followed by a ``NOTIFY`` on the schema's channel
(:attr:`PostgresStore.channel`) with the run id as payload; :meth:`PostgresStore.watch`
listens for them (the console's live view).

psycopg is imported when a store is created, not when ``stargraph`` is imported.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from stargraph.checkpoint._codec import crc as _crc
from stargraph.checkpoint._codec import encode as _encode
from stargraph.checkpoint._dsn import describe_dsn, redact
from stargraph.checkpoint._lease import owner_blob
from stargraph.checkpoint._node_cache import PostgresNodeCache
from stargraph.checkpoint._records import (
    JournalEntry,
    PendingWrite,
    RunOwner,
    RunRecord,
    StepRecord,
    iso_now,
    turn_taken,
    unicode_problem,
)
from stargraph.checkpoint._sql import (
    RUN_COLUMNS,
    Commit,
    SqlStore,
    decode_run,
    may_acquire,
)
from stargraph.errors import CheckpointError, StoreUnavailableError

if TYPE_CHECKING:
    import psycopg

    from stargraph.checkpoint._watch import RunWatch

__all__ = ["SCHEMA_VERSION", "PostgresStore", "describe_dsn", "migrate", "redact"]

SCHEMA_VERSION: Final = 5
"""The schema this code writes; older schemas are migrated when a store opens them."""

# Each entry takes the schema from version ``i`` to ``i + 1``. ``{s}`` is the quoted schema.
# Never edit a shipped migration: append a new one.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE {s}.runs (
            run_id bytea PRIMARY KEY,
            graph_name bytea NOT NULL,
            graph_hash bytea NOT NULL,
            code_hash bytea NOT NULL,
            status text NOT NULL,
            last_step bigint NOT NULL,
            parent_run_id bytea,
            parent_step bigint,
            created_at bytea NOT NULL,
            updated_at text NOT NULL,
            extra bytea
        )""",
        "CREATE INDEX runs_by_created ON {s}.runs (created_at, run_id)",
        """CREATE TABLE {s}.steps (
            run_id bytea NOT NULL REFERENCES {s}.runs (run_id) ON DELETE CASCADE,
            step bigint NOT NULL,
            has_snapshot boolean NOT NULL,
            payload bytea NOT NULL,
            PRIMARY KEY (run_id, step)
        )""",
        """CREATE TABLE {s}.pending (
            run_id bytea NOT NULL REFERENCES {s}.runs (run_id) ON DELETE CASCADE,
            step bigint NOT NULL,
            node bytea NOT NULL,
            idx bigint NOT NULL,
            payload bytea NOT NULL,
            PRIMARY KEY (run_id, step, node, idx)
        )""",
        """CREATE TABLE {s}.journal (
            run_id bytea NOT NULL REFERENCES {s}.runs (run_id) ON DELETE CASCADE,
            step bigint NOT NULL,
            node bytea NOT NULL,
            idx bigint NOT NULL,
            seq bigint NOT NULL,
            kind bytea NOT NULL,
            key bytea NOT NULL,
            payload bytea NOT NULL,
            PRIMARY KEY (run_id, step, node, idx, seq)
        )""",
    ),
    (
        "ALTER TABLE {s}.runs ADD COLUMN lease_token text, ADD COLUMN lease_owner bytea, "
        "ADD COLUMN lease_expires timestamptz",
        "ALTER TABLE {s}.steps ADD COLUMN crc bigint",
        "ALTER TABLE {s}.pending ADD COLUMN crc bigint",
        "ALTER TABLE {s}.journal ADD COLUMN crc bigint",
    ),
    (
        # Threads (see the SQLite store): the unique index fences two callers starting the
        # same turn of a thread.
        "ALTER TABLE {s}.runs ADD COLUMN thread_id bytea, ADD COLUMN turn bigint",
        "CREATE UNIQUE INDEX runs_by_thread ON {s}.runs (thread_id, turn) "
        "WHERE thread_id IS NOT NULL",
    ),
    (
        # Graphs (see the SQLite store): the IR every run's graph_hash names, once per hash.
        "CREATE TABLE {s}.graphs (graph_hash bytea PRIMARY KEY, ir bytea NOT NULL)",
    ),
    (
        # Honest outcomes (see the SQLite store): a run stored 'done' by a rule other than
        # termination/done, the shipped success rule, was halted by it.
        # CASE, not AND: only a done row's extra is read (another's may hold NaN, which
        # jsonb refuses).
        "UPDATE {s}.runs SET status = 'halted' WHERE CASE WHEN status = 'done' AND extra "
        "IS NOT NULL THEN coalesce(convert_from(extra, 'UTF8')::jsonb ->> 'stopped_by', "
        "'termination/done') != 'termination/done' ELSE false END",
    ),
)

_SCHEMA_NAME: Final = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# What a runs row is read as: the stored columns, then whether the lease lapsed by the
# server's clock.
_RUN_SELECT: Final = f"{RUN_COLUMNS}, lease_expires < clock_timestamp()"
_EXPIRED: Final = 16


def _b(text: str | None, *, run_id: str) -> bytes | None:
    if text is None:
        return None
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise CheckpointError(
            f"cannot store or look up {text!r} of run {run_id!r}: {unicode_problem(text)}; "
            "run ids, node names and other stored text must be valid Unicode (UTF-8), so use "
            "a plain string",
            run_id=run_id,
        ) from exc


def _lease_columns(owner: RunOwner | None) -> tuple[str | None, bytes | None, float | None]:
    if owner is None:
        return None, None, None
    return owner.token, owner_blob(owner), owner.lease_s


def migrate(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    key: str,
    target: int,
    migrations: Sequence[Sequence[str]],
    lock: str,
    too_new: Callable[[int], Exception] | None = None,
) -> None:
    """Bring the version ``key`` in ``<schema>.meta`` to ``target``: the migrations from the
    recorded version on (``{s}`` in each statement is ``schema``, quoted), in one transaction
    under the advisory lock ``lock``, so several processes opening a fresh database at once
    migrate it exactly once (the others wait, then find it done). ``too_new`` is raised for
    a version this code does not know."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {schema}.meta (key text PRIMARY KEY, value text NOT NULL)"
        )
        row = conn.execute(f"SELECT value FROM {schema}.meta WHERE key = %s", (key,)).fetchone()
        version = int(row[0]) if row else 0
        if version > target and too_new is not None:
            raise too_new(version)
        for statements in migrations[version:]:
            for sql in statements:
                conn.execute(sql.format(s=schema))
        conn.execute(
            f"INSERT INTO {schema}.meta (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (key, str(target)),
        )


def _key(run_id: str) -> bytes:
    key = _b(run_id, run_id=run_id)
    assert key is not None
    return key


def _t(raw: bytes | memoryview | None) -> str | None:
    return None if raw is None else bytes(raw).decode()


def _lease(expires: datetime, row: Any) -> tuple[str, bool]:
    """A stored lease expiry as ISO text, and whether it lapsed by the server's clock."""
    return expires.isoformat(), bool(row[_EXPIRED])


class _Pool:
    """A small thread-safe connection pool (autocommit connections), fork-aware."""

    def __init__(self, connect: Any, size: int, timeout: float) -> None:
        self._connect = connect
        self._size = size
        self._timeout = timeout
        self._lock = threading.Lock()
        self._idle: list[psycopg.Connection[Any]] = []
        self._slots = threading.BoundedSemaphore(size)
        self._closed = False
        self._pid = os.getpid()
        # Connections inherited through fork() share sockets with the parent: never used or
        # closed by the child, only set aside here.
        self._inherited: list[psycopg.Connection[Any]] = []

    def _after_fork(self) -> None:
        with self._lock:
            self._inherited.extend(self._idle)
            self._idle = []
            self._slots = threading.BoundedSemaphore(self._size)
            self._pid = os.getpid()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        if os.getpid() != self._pid:
            self._after_fork()
        slots = self._slots
        if not slots.acquire(timeout=self._timeout):
            raise CheckpointError(
                f"no free PostgreSQL connection within {self._timeout:g}s "
                f"(pool_size={self._size}); raise pool_size"
            )
        conn: psycopg.Connection[Any] | None = None
        try:
            with self._lock:
                if self._closed:
                    raise CheckpointError("the PostgresStore is closed")
                conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed:
                conn = self._connect()
            yield conn
        finally:
            # A connection left mid-transaction or broken is closed, not reused.
            if conn is not None:
                keep = not conn.closed and conn.info.transaction_status == 0  # IDLE
                with self._lock:
                    if keep and not self._closed:
                        self._idle.append(conn)
                        conn = None
                if conn is not None:
                    conn.close()
            slots.release()

    def discard_idle(self) -> None:
        """Close the idle connections: one was found broken (the server restarted, or
        killed it), so the others are likely broken too; new ones are opened on demand."""
        with self._lock:
            idle, self._idle = self._idle, []
        if os.getpid() != self._pid:
            return
        for conn in idle:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        if os.getpid() != self._pid:
            return
        for conn in idle:
            conn.close()


class PostgresStore(SqlStore):
    """A ``CheckpointStore`` in a PostgreSQL database, safe across threads and processes.

    ``dsn`` is a libpq connection string (``postgresql://user@host:5432/db``); tables live in
    ``schema`` (created if missing). Up to ``pool_size`` connections are opened on demand.
    A bad connection string or an unreachable server raises ``CheckpointError`` naming the
    host and never the password. Use it as a context manager or call :meth:`close`.
    """

    _mark = "%s"

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "stargraph",
        pool_size: int = 8,
        connect_timeout_s: float = 10.0,
        application_name: str = "stargraph",
    ) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise CheckpointError(
                "PostgresStore needs psycopg 3: pip install 'stargraph[postgres]'"
            ) from exc
        if not _SCHEMA_NAME.match(schema):
            raise CheckpointError(
                f"schema name {schema!r} must be lower-case letters, digits and underscores"
            )
        if pool_size < 1:
            raise CheckpointError(f"pool_size must be at least 1, got {pool_size}")
        self._psycopg = psycopg
        self._dsn = dsn
        self._where, self._password = describe_dsn(dsn)
        self._schema = schema
        self._runs_at = f"PostgreSQL schema {schema} at {self._where}"
        self._s = f'"{schema}"'
        self._select_runs = f"SELECT {_RUN_SELECT} FROM {self._s}.runs"
        self._connect_timeout = max(1, round(connect_timeout_s))
        self._application_name = application_name
        self._closed = False
        # The connection of a write_run under way on this thread (see _conn).
        self._local = threading.local()
        self._pool = _Pool(self._open, pool_size, timeout=max(30.0, connect_timeout_s * 3))
        self._node_cache: PostgresNodeCache | None = None
        self.close_if_raises(self._setup)

    # ----------------------------------------------------------------- connections

    @property
    def dsn(self) -> str:
        """The connection string given (it may hold a password: do not log it)."""
        return self._dsn

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the tables."""
        return self._schema

    @property
    def where(self) -> str:
        """``host:port/dbname as user``: the server, for messages (no password)."""
        return self._where

    def _open(self) -> psycopg.Connection[Any]:
        try:
            return self._psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=self._connect_timeout,
                application_name=self._application_name,
            )
        except self._psycopg.Error as exc:
            # libpq's message spans lines (a hint on the second): one paragraph here.
            reason = " ".join(redact(str(exc), self._password).split())
            raise StoreUnavailableError(
                f"cannot connect to PostgreSQL at {self._where}: {reason}; check that the "
                "server is up and reachable (a worker keeps retrying)"
            ) from None

    def connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection of this store's server (the caller closes it)."""
        return self._open()

    def node_cache(self) -> PostgresNodeCache:
        """The entries of cached nodes (feature ``node_cache``), in the schema's
        ``node_cache`` table (made on first use), on the store's pooled connections: shared
        by every graph, store object and process on the schema."""
        if self._node_cache is None:
            self._node_cache = PostgresNodeCache(self._conn, self._s)
        return self._node_cache

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        batch = getattr(self._local, "batch", None)
        if batch is not None:  # inside write_run on this thread: join its transaction
            yield batch
            return
        if self._closed:
            raise CheckpointError(f"the PostgresStore on {self._where} is closed")
        with self._pool.connection() as conn:
            try:
                yield conn
            except self._psycopg.Error as exc:
                raise self._db_error(exc) from exc

    # A pooled connection autocommits each statement, so a write needs no more than _conn.
    _write = _conn

    def _db_error(self, exc: Exception, run_id: str | None = None) -> CheckpointError:
        where = f"run {run_id!r} in " if run_id else ""
        psycopg = self._psycopg
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            # The connection broke (a restart, pg_terminate_backend, a network cut) or the
            # server is short of a resource; the others in the pool are likely broken too.
            self._pool.discard_idle()
            reason = " ".join(redact(str(exc), self._password).split())
            return StoreUnavailableError(
                f"{where}PostgreSQL store at {self._where} (schema {self._schema}): "
                f"{reason}; the statement was not applied, "
                "or for a lost connection it may have been (the store's fences make a retry "
                "safe); the next call reconnects: check the server, then resume the run",
                run_id=run_id,
            )
        return CheckpointError(
            f"{where}PostgreSQL store at {self._where} (schema {self._schema}): "
            f"{redact(str(exc).strip(), self._password)}",
            run_id=run_id,
        )

    def close(self) -> None:
        """Close every pooled connection. Safe to call twice."""
        self._closed = True
        self._pool.close()

    # ----------------------------------------------------------------- schema

    def schema_version(self) -> int:
        """The schema version recorded in ``<schema>.meta`` (0 for none)."""
        with self._conn() as conn:
            return self._version(conn)

    def _version(self, conn: psycopg.Connection[Any]) -> int:
        exists = conn.execute("SELECT to_regclass(%s)", (f"{self._s}.meta",)).fetchone()
        if exists is None or exists[0] is None:
            return 0
        row = conn.execute(
            f"SELECT value FROM {self._s}.meta WHERE key = 'schema_version'"
        ).fetchone()
        return int(row[0]) if row else 0

    def _setup(self) -> None:
        with self._conn() as conn:
            version = self._version(conn)
            if version > SCHEMA_VERSION:
                raise self._too_new(version)
            if version == SCHEMA_VERSION:
                return
            migrate(
                conn,
                self._s,
                key="schema_version",
                target=SCHEMA_VERSION,
                migrations=_MIGRATIONS,
                lock=f"sg:{self._schema}",
                too_new=self._too_new,
            )

    def _too_new(self, version: int) -> CheckpointError:
        return CheckpointError(
            f"PostgreSQL schema {self._schema} at {self._where} has schema version {version}, "
            f"newer than the {SCHEMA_VERSION} this stargraph understands; upgrade stargraph"
        )

    # ----------------------------------------------------------------- helpers

    def _table(self, name: str) -> str:
        return f"{self._s}.{name}"

    def _key(self, text: str) -> object:
        return _key(text)

    def _query(self, sql: str, params: Sequence[object]) -> list[Any]:
        with self._conn() as conn:
            return conn.execute(sql, params).fetchall()

    def _exists(self, conn: psycopg.Connection[Any], key: bytes) -> bool:
        row = conn.execute(f"SELECT 1 FROM {self._s}.runs WHERE run_id = %s", (key,)).fetchone()
        return row is not None

    def _decode_run(self, row: Sequence[Any]) -> RunRecord:
        return decode_run(
            row,
            lease=_lease,
            damaged=f"the PostgreSQL schema {self._schema} is damaged",
            text=_t,
        )

    # ----------------------------------------------------------------- change notices

    @property
    def channel(self) -> str:
        """The ``NOTIFY`` channel of this store's schema. Its payload is the id of the run
        that changed, or ``''`` for an id a payload cannot carry (one holding NUL, or over
        7,900 bytes): some run changed."""
        return f"stargraph_{self._schema}"[:63]  # a channel name has at most 63 bytes

    def _notify(self, conn: psycopg.Connection[Any], run_id: str) -> None:
        """Tell listeners that ``run_id`` changed: called on the write's connection right
        after the write committed.

        The notice is a transaction of its own, not part of the write's: a transaction that
        notifies holds a database-wide lock from its commit until it ends, WAL flush
        included, so notifying writes commit one at a time (4 threads committing steps with
        fsync on: 203 commits/s with the notice inside, 427 with it after, 508 without). A
        notice that cannot be sent is dropped (the write stands; listeners also look again
        every few seconds)."""
        payload = run_id if "\x00" not in run_id and len(run_id.encode()) < 7900 else ""
        # A broken connection is dropped by the pool when handed back.
        with contextlib.suppress(self._psycopg.Error):
            conn.execute("SELECT pg_notify(%s, %s)", (self.channel, payload))

    def announce(self, run_id: str) -> None:
        """Notify :attr:`channel` that ``run_id`` changed without a write of this store:
        ``stargraph serve`` announces the model tokens it stores beside the checkpoints, so
        a console watching the run reads them at once. Best effort, as every notice."""
        with self._conn() as conn:
            self._notify(conn, run_id)

    def watch(self, run_id: str | None = None) -> RunWatch:
        """Wait for changes of run ``run_id`` (of any run: ``None``) as they commit, on a
        dedicated connection that ``LISTEN``s on :attr:`channel`: opened by ``async with``,
        closed when the block ends (see :class:`~stargraph.checkpoint.RunWatch`)."""
        from stargraph.checkpoint._watch import ListenWatch

        return ListenWatch(
            self._dsn,
            self.channel,
            run_id,
            where=self._where,
            password=self._password,
            connect_timeout=self._connect_timeout,
            application_name=f"{self._application_name}-listen",
        )

    # ----------------------------------------------------------------- writes

    def create_run(self, run: RunRecord, first: StepRecord) -> None:
        """Insert a new run with its step 0, atomically. Raises if the run id exists.
        With ``run.owner`` set, the new run is leased to that owner."""
        rid = run.run_id
        key = _key(rid)
        payload, extra, at = self._new_run(run, first)
        values = (
            key,
            _b(run.graph_name, run_id=rid),
            _b(run.graph_hash, run_id=rid),
            _b(run.code_hash, run_id=rid),
            run.status,
            first.step,
            _b(run.parent_run_id, run_id=rid),
            run.parent_step,
            _b(run.created_at or at, run_id=rid),
            at,
            extra,
            *_lease_columns(run.owner),
            _b(run.thread_id, run_id=rid),
            run.turn,
        )
        with self._conn() as conn:
            # ON CONFLICT without a target: a clash on the run id or on (thread, turn) both
            # insert nothing; which one it was is looked up below.
            row = conn.execute(
                f"WITH ins AS (INSERT INTO {self._s}.runs ({RUN_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                "clock_timestamp() + %s * interval '1 second', %s, %s) "
                "ON CONFLICT DO NOTHING RETURNING run_id), "
                f"st AS (INSERT INTO {self._s}.steps (run_id, step, has_snapshot, payload, crc) "
                "SELECT run_id, %s, %s, %s, %s FROM ins) SELECT count(*) FROM ins",
                (*values, first.step, first.snapshot is not None, payload, _crc(payload)),
            ).fetchone()
            if row is None or row[0] != 1:
                if run.thread_id is not None and not self._exists(conn, key):
                    holder = conn.execute(
                        f"SELECT run_id FROM {self._s}.runs WHERE thread_id = %s AND turn = %s",
                        (_b(run.thread_id, run_id=rid), run.turn),
                    ).fetchone()
                    raise turn_taken(run, None if holder is None else _t(holder[0]))
                raise CheckpointError(
                    f"run {rid!r} already exists; pick another run_id or resume it",
                    run_id=rid,
                )
            self._notify(conn, rid)

    @contextmanager
    def _batch(self) -> Iterator[psycopg.Connection[Any]]:
        with self._conn() as conn, conn.transaction():
            # The store's methods take this connection while it is set (see _conn).
            self._local.batch = conn
            try:
                yield conn
            finally:
                self._local.batch = None

    def acquire(self, run_id: str, owner: RunOwner, *, replace: str | None = None) -> RunRecord:
        """Lease the run to ``owner`` unless another live owner holds it; returns the run's
        record from just before."""
        key = _key(run_id)
        s = self._s
        with self._conn() as conn, conn.transaction():
            row = conn.execute(
                f"SELECT {_RUN_SELECT} FROM {s}.runs WHERE run_id = %s FOR UPDATE", (key,)
            ).fetchone()
            if row is None:
                raise self._missing(run_id)
            before = self._decode_run(row)
            may_acquire(before, owner, replace=replace, expired=bool(row[_EXPIRED]))
            token, blob, lease_s = _lease_columns(owner)
            conn.execute(
                f"UPDATE {s}.runs SET lease_token = %s, lease_owner = %s, "
                "lease_expires = clock_timestamp() + %s * interval '1 second' "
                "WHERE run_id = %s",
                (token, blob, lease_s, key),
            )
        return before

    _token_is = "lease_token IS NOT DISTINCT FROM %s::text"

    def _lease_until(self, lease_s: float) -> tuple[str, object]:
        return "clock_timestamp() + %s * interval '1 second'", lease_s

    def _text(self, value: str | None, run_id: str) -> object:
        return _b(value, run_id=run_id)

    def _advance(self, run_id: str, number: int, commit: Commit) -> None:
        status, extra, owner, snapshot, payload = commit
        key = _key(run_id)
        s = self._s
        with self._conn() as conn:
            # One statement: the compare-and-set on last_step and the lease gates the rest.
            row = conn.execute(
                f"WITH adv AS (UPDATE {s}.runs SET last_step = %(n)s, status = %(status)s, "
                "extra = %(extra)s, updated_at = %(now)s "
                "WHERE run_id = %(run)s AND last_step = %(prev)s "
                "AND lease_token IS NOT DISTINCT FROM %(owner)s::text RETURNING run_id), "
                f"ins AS (INSERT INTO {s}.steps (run_id, step, has_snapshot, payload, crc) "
                "SELECT run_id, %(n)s, %(snap)s, %(payload)s, %(crc)s FROM adv), "
                f"dp AS (DELETE FROM {s}.pending WHERE run_id = %(run)s AND step = %(n)s "
                "AND EXISTS (SELECT 1 FROM adv)), "
                f"dj AS (DELETE FROM {s}.journal WHERE run_id = %(run)s AND step = %(n)s "
                "AND EXISTS (SELECT 1 FROM adv)) "
                "SELECT count(*) FROM adv",
                {
                    "n": number,
                    "status": status,
                    "extra": extra,
                    "now": iso_now(),
                    "run": key,
                    "prev": number - 1,
                    "owner": owner,
                    "snap": snapshot,
                    "payload": payload,
                    "crc": _crc(payload),
                },
            ).fetchone()
            if row is not None and row[0] == 1:
                self._notify(conn, run_id)
                return
            raise self._fence_error(conn, run_id, owner, number)

    def put_graph(self, graph_hash: str, ir: bytes) -> None:
        """Keep a graph's IR by its hash (the first copy stays)."""
        with self._conn() as conn:
            conn.execute(
                f"INSERT INTO {self._s}.graphs (graph_hash, ir) VALUES (%s, %s) "
                "ON CONFLICT (graph_hash) DO NOTHING",
                (_b(graph_hash, run_id=graph_hash), bytes(ir)),
            )

    def get_graph(self, graph_hash: str) -> bytes | None:
        """The IR kept for ``graph_hash``, or ``None``."""
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT ir FROM {self._s}.graphs WHERE graph_hash = %s",
                (_b(graph_hash, run_id=graph_hash),),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def _insert_child(self, run_id: str, sql: str, params: tuple[object, ...]) -> None:
        with self._conn() as conn:
            try:
                conn.execute(sql, params)
            except self._psycopg.errors.ForeignKeyViolation:
                raise self._missing(run_id) from None

    def put_pending(self, run_id: str, write: PendingWrite) -> None:
        """Save one finished task's writes for a step not yet committed (idempotent)."""
        payload = _encode(write, run_id=run_id, step=write.step)
        self._insert_child(
            run_id,
            f"INSERT INTO {self._s}.pending (run_id, step, node, idx, payload, crc) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (
                _b(run_id, run_id=run_id),
                write.step,
                _b(write.node, run_id=run_id),
                write.index,
                payload,
                _crc(payload),
            ),
        )

    def append_journal(self, run_id: str, entry: JournalEntry, *, replace: bool = False) -> None:
        """Record one call of a task execution (idempotent on its position: the first entry
        stays, unless ``replace``)."""
        payload = _encode(entry, run_id=run_id, step=entry.step)
        conflict = (
            "ON CONFLICT (run_id, step, node, idx, seq) DO UPDATE SET kind = EXCLUDED.kind, "
            "key = EXCLUDED.key, payload = EXCLUDED.payload, crc = EXCLUDED.crc"
            if replace
            else "ON CONFLICT DO NOTHING"
        )
        self._insert_child(
            run_id,
            f"INSERT INTO {self._s}.journal "
            "(run_id, step, node, idx, seq, kind, key, payload, crc) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) {conflict}",
            (
                _b(run_id, run_id=run_id),
                entry.step,
                _b(entry.node, run_id=run_id),
                entry.index,
                entry.seq,
                _b(entry.kind, run_id=run_id),
                _b(entry.key, run_id=run_id),
                payload,
                _crc(payload),
            ),
        )

    # ----------------------------------------------------------------- reads

    # ----------------------------------------------------------------- maintenance

    def drop_schema(self) -> None:
        """Delete the schema and every run in it (tests, benchmarks). Irreversible."""
        with self._conn() as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self._s} CASCADE")

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Block until a connection works (for a server that is still starting)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with self._conn() as conn:
                    conn.execute("SELECT 1")
                return
            except CheckpointError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
