"""``PostgresStore``: the ``CheckpointStore`` on PostgreSQL (psycopg 3, extra ``postgres``).

Layout (schema version 3, kept in ``<schema>.meta``; everything lives in its own schema,
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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import pydantic_core

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
    check_thread,
    clip_error,
    turn_taken,
    unicode_problem,
)
from stargraph.checkpoint._sqlite import _crc, _decode, _encode, _encode_extra, _why
from stargraph.errors import (
    CheckpointError,
    CorruptCheckpointError,
    RunNotFoundError,
    StoreUnavailableError,
)

if TYPE_CHECKING:
    import psycopg

    from stargraph.checkpoint._watch import RunWatch

__all__ = ["SCHEMA_VERSION", "PostgresStore", "describe_dsn", "redact"]

SCHEMA_VERSION: Final = 4
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
)

_SCHEMA_NAME: Final = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_STATUSES: Final = STORED_STATUSES
_RUN_COLUMNS: Final = (
    "run_id, graph_name, graph_hash, code_hash, status, last_step, parent_run_id, "
    "parent_step, created_at, updated_at, extra"
)
# What a runs row is read as: the stored columns, then the lease and whether it lapsed by
# the server's clock.
_RUN_SELECT: Final = (
    f"{_RUN_COLUMNS}, lease_token, lease_owner, lease_expires, lease_expires < clock_timestamp(), "
    "thread_id, turn"
)
_EXTRA_FIELDS: Final = ("error", "stopped_by", "interrupt")
_MAX_STEP: Final = 2**63 - 1


def _now() -> str:
    return datetime.now(UTC).isoformat()


def redact(text: str, password: str | None = None) -> str:
    """``text`` with any password (URL userinfo, ``password=...``) replaced by ``***``."""
    text = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)
    text = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", text, flags=re.IGNORECASE)
    if password:
        text = text.replace(password, "***")
    return text


def describe_dsn(dsn: str) -> tuple[str, str | None]:
    """``("host:port/dbname as user", password)`` for messages; raises ``CheckpointError``
    (without the password) for a string that is not a connection string."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        # libpq's reason quotes fragments of the string, which may be the password: say only
        # which host it seems to name.
        match = re.search(r"@\[?([^/?\[\]\s]+)", dsn) or re.search(r"host\s*=\s*(\S+)", dsn)
        host = f" for host {match.group(1)}" if match else ""
        raise CheckpointError(
            f"invalid PostgreSQL connection string{host}; "
            "use postgresql://user[:password]@host:port/dbname or 'host=... dbname=...'"
        ) from None
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or "5432")
    where = f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"
    if params.get("user"):
        where += f" as {params['user']}"
    password = params.get("password")
    return where, str(password) if password else None


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


def _key(run_id: str) -> bytes:
    key = _b(run_id, run_id=run_id)
    assert key is not None
    return key


def _t(raw: bytes | memoryview | None) -> str | None:
    return None if raw is None else bytes(raw).decode()


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
        # closed by the child, only parked here.
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


class PostgresStore:
    """A ``CheckpointStore`` in a PostgreSQL database, safe across threads and processes.

    ``dsn`` is a libpq connection string (``postgresql://user@host:5432/db``); tables live in
    ``schema`` (created if missing). Up to ``pool_size`` connections are opened on demand.
    A bad connection string or an unreachable server raises ``CheckpointError`` naming the
    host and never the password. Use it as a context manager or call :meth:`close`.
    """

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
        self._s = f'"{schema}"'
        self._connect_timeout = max(1, round(connect_timeout_s))
        self._application_name = application_name
        self._closed = False
        self._pool = _Pool(self._open, pool_size, timeout=max(30.0, connect_timeout_s * 3))
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

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

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        if self._closed:
            raise CheckpointError(f"the PostgresStore on {self._where} is closed")
        with self._pool.connection() as conn:
            try:
                yield conn
            except self._psycopg.Error as exc:
                raise self._db_error(exc) from exc

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

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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
            with conn.transaction():
                # One migrator per schema at a time; the others wait, then see it is done.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sg:{self._schema}",))
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self._s}")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._s}.meta "
                    "(key text PRIMARY KEY, value text NOT NULL)"
                )
                version = self._version(conn)
                if version > SCHEMA_VERSION:
                    raise self._too_new(version)
                for statements in _MIGRATIONS[version:]:
                    for sql in statements:
                        conn.execute(sql.format(s=self._s))
                conn.execute(
                    f"INSERT INTO {self._s}.meta (key, value) VALUES ('schema_version', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    (str(SCHEMA_VERSION),),
                )

    def _too_new(self, version: int) -> CheckpointError:
        return CheckpointError(
            f"PostgreSQL schema {self._schema} at {self._where} has schema version {version}, "
            f"newer than the {SCHEMA_VERSION} this stargraph understands; upgrade stargraph"
        )

    # ----------------------------------------------------------------- helpers

    def _missing(self, run_id: str) -> RunNotFoundError:
        return RunNotFoundError(
            f"no run {run_id!r} in PostgreSQL schema {self._schema} at {self._where}; "
            "list runs with store.list_runs()",
            run_id=run_id,
        )

    def _check_status(self, run_id: str, status: str) -> None:
        if status not in _STATUSES:
            raise CheckpointError(
                f"run {run_id!r}: unknown status {status!r}; use one of {sorted(_STATUSES)}",
                run_id=run_id,
            )

    def _exists(self, conn: psycopg.Connection[Any], key: bytes) -> bool:
        row = conn.execute(f"SELECT 1 FROM {self._s}.runs WHERE run_id = %s", (key,)).fetchone()
        return row is not None

    def _decode_run(self, row: tuple[Any, ...]) -> RunRecord:
        run_id = "?"
        step = row[5] if isinstance(row[5], int) else None
        try:
            run_id = _t(row[0]) or ""
            data: dict[str, Any] = {
                "run_id": run_id,
                "graph_name": _t(row[1]),
                "graph_hash": _t(row[2]),
                "code_hash": _t(row[3]),
                "status": row[4],
                "last_step": row[5],
                "parent_run_id": _t(row[6]),
                "parent_step": row[7],
                "created_at": _t(row[8]),
                "updated_at": row[9],
            }
            if row[10] is not None:
                extra = pydantic_core.from_json(bytes(row[10]))
                if not isinstance(extra, dict) or not set(extra) <= set(_EXTRA_FIELDS):
                    raise TypeError("the extra column is not an object of error/stopped_by/...")
                data.update(extra)
            if row[12] is not None:
                data["owner"] = owner_from(str(row[11]), bytes(row[12]))
                data["lease_expires"] = row[13].isoformat()
            if row[15] is not None:
                data["thread_id"], data["turn"] = _t(row[15]), row[16]
            record = RunRecord.model_validate(data)
        except (ValueError, TypeError, AttributeError) as exc:  # ValidationError, Unicode...
            raise CorruptCheckpointError(
                f"run {run_id!r} step {step}: the runs row cannot be decoded "
                f"({_why(exc)}); the PostgreSQL schema {self._schema} is damaged",
                run_id=run_id,
                step=step,
            ) from exc
        status = effective_status(record.status, record.owner, expired=bool(row[14]))
        return record if status == record.status else record.model_copy(update={"status": status})

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
        self._check_status(rid, run.status)
        check_thread(run)
        payload = _encode(first, run_id=rid, step=first.step, pack=True)
        extra = _encode_extra(clip_error(run.error), run.stopped_by, run.interrupt, run_id=rid)
        now = _now()
        values = (
            key,
            _b(run.graph_name, run_id=rid),
            _b(run.graph_hash, run_id=rid),
            _b(run.code_hash, run_id=rid),
            run.status,
            first.step,
            _b(run.parent_run_id, run_id=rid),
            run.parent_step,
            _b(run.created_at or now, run_id=rid),
            now,
            extra,
            *_lease_columns(run.owner),
            _b(run.thread_id, run_id=rid),
            run.turn,
        )
        with self._conn() as conn:
            # ON CONFLICT without a target: a clash on the run id or on (thread, turn) both
            # insert nothing; which one it was is looked up below.
            row = conn.execute(
                f"WITH ins AS (INSERT INTO {self._s}.runs ({_RUN_COLUMNS}, lease_token, "
                "lease_owner, lease_expires, thread_id, turn) "
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

    def _fence_error(
        self, conn: psycopg.Connection[Any], run_id: str, owner: str | None, step: int | None
    ) -> CheckpointError:
        """Why a compare-and-set on ``(last_step, lease_token)`` matched no row."""
        row = conn.execute(
            f"SELECT last_step, lease_token, lease_owner FROM {self._s}.runs WHERE run_id = %s",
            (_key(run_id),),
        ).fetchone()
        if row is None:
            return self._missing(run_id)
        if step is not None and row[0] != step - 1:
            return CheckpointError(
                f"run {run_id!r}: step {step} cannot follow committed step {row[0]}; "
                "another writer owns this run, or history was forked",
                run_id=run_id,
                step=step,
            )
        holder = None if row[2] is None else owner_from(str(row[1]), bytes(row[2]))
        return lease_lost(run_id, owner, holder)

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
            held = before.owner
            if (
                held is not None
                and held.token not in (replace, owner.token)
                and before.status != "orphaned"
                and not is_orphaned(held, expired=bool(row[14]))
            ):
                raise busy_error(run_id, held, before.lease_expires)
            token, blob, lease_s = _lease_columns(owner)
            conn.execute(
                f"UPDATE {s}.runs SET lease_token = %s, lease_owner = %s, "
                "lease_expires = clock_timestamp() + %s * interval '1 second' "
                "WHERE run_id = %s",
                (token, blob, lease_s, key),
            )
        return before

    def heartbeat(self, run_id: str, owner: RunOwner) -> bool:
        """Renew ``owner``'s lease; ``False`` if it is not the run's lease any more."""
        with self._conn() as conn:
            cursor = conn.execute(
                f"UPDATE {self._s}.runs SET lease_expires = clock_timestamp() + "
                "%s * interval '1 second' WHERE run_id = %s AND lease_token = %s",
                (owner.lease_s, _key(run_id), owner.token),
            )
            return cursor.rowcount == 1

    def release(self, run_id: str, token: str) -> None:
        """Give up the lease ``token`` without changing the status."""
        with self._conn() as conn:
            conn.execute(
                f"UPDATE {self._s}.runs SET lease_token = NULL, lease_owner = NULL, "
                "lease_expires = NULL WHERE run_id = %s AND lease_token = %s",
                (_key(run_id), token),
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
                    "now": _now(),
                    "run": key,
                    "prev": number - 1,
                    "owner": owner,
                    "snap": step.snapshot is not None,
                    "payload": payload,
                    "crc": _crc(payload),
                },
            ).fetchone()
            if row is not None and row[0] == 1:
                self._notify(conn, run_id)
                return
            raise self._fence_error(conn, run_id, owner, number)

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
        with self._conn() as conn:
            cursor = conn.execute(
                f"UPDATE {self._s}.runs SET status = %s, extra = %s, updated_at = %s{release} "
                "WHERE run_id = %s AND lease_token IS NOT DISTINCT FROM %s::text",
                (status, extra, _now(), _key(run_id), owner),
            )
            if cursor.rowcount != 1:
                raise self._fence_error(conn, run_id, owner, None)
            self._notify(conn, run_id)

    def set_graph(self, run_id: str, *, graph_hash: str, code_hash: str) -> None:
        """Record that the run continues under another graph (after an explicit migration)."""
        with self._conn() as conn:
            cursor = conn.execute(
                f"UPDATE {self._s}.runs SET graph_hash = %s, code_hash = %s, updated_at = %s "
                "WHERE run_id = %s",
                (
                    _b(graph_hash, run_id=run_id),
                    _b(code_hash, run_id=run_id),
                    _now(),
                    _b(run_id, run_id=run_id),
                ),
            )
            if cursor.rowcount != 1:
                raise self._missing(run_id)

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

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record; ``RunNotFoundError`` if there is none."""
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT {_RUN_SELECT} FROM {self._s}.runs WHERE run_id = %s",
                (_b(run_id, run_id=run_id),),
            ).fetchone()
        if row is None:
            raise self._missing(run_id)
        return self._decode_run(row)

    def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by status."""
        with self._conn() as conn:
            if status is None:
                rows = conn.execute(
                    f"SELECT {_RUN_SELECT} FROM {self._s}.runs "
                    "ORDER BY created_at DESC, run_id DESC LIMIT %s",
                    (limit,),
                ).fetchall()
            elif status in ("running", "orphaned"):
                # Stored as running; which of them are orphaned is known once decoded.
                rows = conn.execute(
                    f"SELECT {_RUN_SELECT} FROM {self._s}.runs WHERE status = 'running' "
                    "ORDER BY created_at DESC, run_id DESC"
                ).fetchall()
                runs = [self._decode_run(row) for row in rows]
                return [r for r in runs if r.status == status][:limit]
            else:
                rows = conn.execute(
                    f"SELECT {_RUN_SELECT} FROM {self._s}.runs WHERE status = %s "
                    "ORDER BY created_at DESC, run_id DESC LIMIT %s",
                    (status, limit),
                ).fetchall()
        return [self._decode_run(row) for row in rows]

    def get_thread(self, thread_id: str) -> list[RunRecord]:
        """The runs of thread ``thread_id`` in turn order (empty for an unknown thread)."""
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_RUN_SELECT} FROM {self._s}.runs WHERE thread_id = %s ORDER BY turn",
                (_b(thread_id, run_id=thread_id),),
            ).fetchall()
        return [self._decode_run(row) for row in rows]

    def list_threads(self, *, limit: int = 100) -> list[RunRecord]:
        """The latest turn of each thread, newest first."""
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_RUN_SELECT} FROM {self._s}.runs AS r WHERE thread_id IS NOT NULL "
                f"AND turn = (SELECT MAX(turn) FROM {self._s}.runs WHERE thread_id = r.thread_id) "
                "ORDER BY created_at DESC, run_id DESC LIMIT %s",
                (limit,),
            ).fetchall()
        return [self._decode_run(row) for row in rows]

    def get_steps(self, run_id: str, *, start: int = 0, end: int | None = None) -> list[StepRecord]:
        """Committed steps ``start..end`` (inclusive) in order."""
        key = _key(run_id)
        hi = min(end, _MAX_STEP) if end is not None else _MAX_STEP
        lo = max(min(start, _MAX_STEP), -_MAX_STEP)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT step, payload, crc FROM {self._s}.steps "
                "WHERE run_id = %s AND step >= %s AND step <= %s ORDER BY step",
                (key, lo, hi),
            ).fetchall()
            if not rows and not self._exists(conn, key):
                raise self._missing(run_id)
        return [
            _decode(StepRecord, bytes(payload), run_id=run_id, step=step, table="steps", crc=crc)
            for step, payload, crc in rows
        ]

    def snapshot_step(self, run_id: str, at_or_before: int) -> int:
        """The newest step ``<= at_or_before`` that holds a full snapshot (0 always does)."""
        key = _key(run_id)
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT max(step) FROM {self._s}.steps "
                "WHERE run_id = %s AND step <= %s AND has_snapshot",
                (key, min(at_or_before, _MAX_STEP)),
            ).fetchone()
            found = None if row is None else row[0]
            if found is None:
                if not self._exists(conn, key):
                    raise self._missing(run_id)
                return 0
        return int(found)

    def get_pending(self, run_id: str, step: int) -> list[PendingWrite]:
        """Pending writes saved for ``step``, ordered by ``(node, index)``."""
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT payload, crc FROM {self._s}.pending WHERE run_id = %s AND step = %s "
                "ORDER BY node, idx",
                (_b(run_id, run_id=run_id), step),
            ).fetchall()
        return [
            _decode(
                PendingWrite, bytes(payload), run_id=run_id, step=step, table="pending", crc=crc
            )
            for payload, crc in rows
        ]

    def get_journal(self, run_id: str, step: int) -> list[JournalEntry]:
        """Journal entries of ``step``, ordered by ``(node, index, seq)``."""
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT payload, crc FROM {self._s}.journal WHERE run_id = %s AND step = %s "
                "ORDER BY node, idx, seq",
                (_b(run_id, run_id=run_id), step),
            ).fetchall()
        return [
            _decode(
                JournalEntry, bytes(payload), run_id=run_id, step=step, table="journal", crc=crc
            )
            for payload, crc in rows
        ]

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
