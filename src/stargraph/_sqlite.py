"""The one SQLite layer every stargraph store opens its file through (stdlib ``sqlite3``).

:class:`Database` owns the connections and the write transaction, so that the checkpoint
store, the run queue, the tool commit log, the agent and proposal stores and the reference
stores all meet a busy file, a fork or a closed store the same way:

* **Connections.** A file gets one connection per thread (WAL readers never block each other
  or the writer), opened on first use and closed together by :meth:`Database.close`; a
  forked child opens its own and never touches (or closes) the parent's. ``":memory:"`` is
  one connection shared by every thread under a lock, since each connection to it would be
  another, empty, database.
* **PRAGMAs, in one place.** ``busy_timeout`` (other processes wait in SQLite's busy handler),
  ``synchronous`` (``NORMAL``: survives a process crash, a power loss may lose the last
  commits but never corrupts the file; ``FULL`` adds an fsync per commit), ``foreign_keys``
  when asked, and ``journal_mode = WAL`` for a file, switched once per :class:`Database` and
  retried while another process holds the file.
* **The write transaction.** :meth:`Database.write` is ``BEGIN IMMEDIATE`` ... ``COMMIT``: the
  writer takes the write lock up front instead of failing to upgrade a read lock later, and a
  per-database lock queues this process's writers in Python rather than in SQLite's sleeping
  busy handler. While another process holds the lock, ``BEGIN`` is retried with jittered
  backoff until ``busy_timeout_s`` is spent. An error rolls back; a write opened inside
  another on the same thread joins it (one commit for both).
* **Errors.** The layer raises nothing of its own: every failure goes through the owner's
  ``fail(exc, doing)`` hook, which turns it into that owner's typed error (a
  ``CheckpointError`` naming the checkpoint file, a ``LifecycleError`` naming the agent
  store ...), or returns ``exc`` to let it through unchanged.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Final, Literal, NoReturn

__all__ = ["Database", "Doing", "Fail", "is_locked", "keep", "table_names"]

Doing = Literal["folder", "open", "closed", "locked", "write", "commit", "read"]
"""What failed: creating the file's folder, opening a connection (connect, PRAGMAs, WAL),
using a closed database, waiting for the write lock past the busy timeout, a statement of a
write transaction (rolled back), its ``COMMIT`` (rolled back), or a read."""

Fail = Callable[[BaseException, Doing], BaseException]
"""The owner's error hook: the exception to raise for ``exc`` met while ``doing``."""

MEMORY: Final = ":memory:"


def keep(exc: BaseException, doing: Doing) -> BaseException:
    """The default hook: let the ``sqlite3`` error through unchanged."""
    return exc


def table_names(path: str | os.PathLike[str], *, timeout_s: float = 5.0) -> frozenset[str]:
    """The names in ``sqlite_master`` of the existing file at ``path``, opened read only: a
    peek at what a file holds before (or instead of) opening it as a store, so the file is
    never created, never switched to WAL and never written. ``sqlite3.Error`` propagates (a
    missing file, or one that is not an SQLite database, is the caller's answer to give)."""
    import contextlib

    uri = f"file:{Path(path).as_posix()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=timeout_s)) as conn:
        return frozenset(row[0] for row in conn.execute("SELECT name FROM sqlite_master"))


def is_locked(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds the file ("database is
    locked" / "busy"), which waiting may cure."""
    text = str(exc)
    return "locked" in text or "busy" in text


class Database:
    """One SQLite file (or ``":memory:"``) with per-thread connections and a write
    transaction; see the module docstring. Thread safe; use :meth:`close` when done.

    ``on_connect`` runs on every new connection (to register SQL functions, say); ``fail``
    maps errors to the owner's typed ones. ``check_same_thread`` is off: :meth:`close` may
    run on another thread than the one that opened a connection.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 30.0,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        foreign_keys: bool = False,
        wal: bool = True,
        cached_statements: int = 128,
        on_connect: Callable[[sqlite3.Connection], None] | None = None,
        fail: Fail = keep,
    ) -> None:
        self.path = str(path)
        self.memory = self.path == MEMORY
        self.timeout = float(busy_timeout_s)
        self._pragmas = (
            f"PRAGMA busy_timeout = {int(self.timeout * 1000)}",
            f"PRAGMA synchronous = {synchronous}",
            *(["PRAGMA foreign_keys = ON"] if foreign_keys else []),
        )
        self._wal = wal and not self.memory
        self._cached = cached_statements
        self._on_connect = on_connect
        self._fail = fail
        self._local = threading.local()
        # Every connection opened, by the thread that opened it, so close() reaches them all.
        self._conns: dict[threading.Thread, sqlite3.Connection] = {}
        self._conns_lock = threading.Lock()
        # Queues this process's writers (and, for ":memory:", every use of the one connection).
        self._lock = threading.RLock()
        self._shared: sqlite3.Connection | None = None
        self._shared_cursor: sqlite3.Cursor | None = None
        self._closed = False
        self._pid = os.getpid()
        # Connections inherited through fork() must not be used (or closed) by the child;
        # they are set aside here so the child never touches them.
        self._inherited: list[sqlite3.Connection] = []
        if not self.memory:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self._raise(exc, "folder")

    # ----------------------------------------------------------------- errors

    def _raise(self, exc: BaseException, doing: Doing) -> NoReturn:
        """Raise the owner's error for ``exc`` (``exc`` itself when the hook keeps it)."""
        mapped = self._fail(exc, doing)
        if mapped is exc:
            raise exc
        raise mapped from exc

    # ----------------------------------------------------------------- connections

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (``":memory:"``: the shared one; hold :meth:`read` or
        :meth:`write` around its use), opened on first use."""
        return self.cursor().connection

    def cursor(self) -> sqlite3.Cursor:
        """This thread's own cursor on :meth:`connection` (``":memory:"``: the shared one's,
        used under the lock), opened with it. The layer runs its statements (``BEGIN``,
        ``COMMIT``, :meth:`run`, :meth:`write_cursor`) on it: ``conn.execute`` makes, registers
        and drops a cursor per statement, and a step commit runs up to six. What it returns
        is valid until this thread's next statement on it."""
        if self._closed:
            self._raise(sqlite3.ProgrammingError("Cannot operate on a closed database."), "closed")
        if self.memory:
            if self._shared_cursor is None:
                with self._lock:
                    if self._shared_cursor is None:
                        conn = self._shared = self._open()
                        self._shared_cursor = conn.cursor()
            return self._shared_cursor
        if os.getpid() != self._pid:
            self._after_fork()
        try:
            cursor: sqlite3.Cursor = self._local.cursor
        except AttributeError:
            conn = self._open()
            me = threading.current_thread()
            with self._conns_lock:
                if self._closed:
                    conn.close()
                    self._raise(
                        sqlite3.ProgrammingError("Cannot operate on a closed database."), "closed"
                    )
                # Connections of threads that have ended would otherwise pile up until close().
                for thread in [t for t in self._conns if not t.is_alive()]:
                    self._conns.pop(thread).close()
                self._conns[me] = conn
            cursor = self._local.cursor = conn.cursor()
        return cursor

    def _after_fork(self) -> None:
        with self._conns_lock:
            self._inherited.extend(self._conns.values())
            self._conns = {}
            self._local = threading.local()
            self._lock = threading.RLock()  # a lock held by another thread at fork stays held
            self._pid = os.getpid()

    def _open(self) -> sqlite3.Connection:
        try:
            # isolation_level=None: BEGIN IMMEDIATE / COMMIT are issued here, not by sqlite3.
            conn = sqlite3.connect(
                self.path,
                timeout=self.timeout,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=self._cached,
            )
        except sqlite3.Error as exc:
            self._raise(exc, "open")
        try:
            for pragma in self._pragmas:
                conn.execute(pragma)
            if self._on_connect is not None:
                self._on_connect(conn)
            if self._wal:
                self._switch_to_wal(conn)
        except sqlite3.Error as exc:
            conn.close()
            self._raise(exc, "open")
        except BaseException:
            conn.close()
            raise
        return conn

    def _switch_to_wal(self, conn: sqlite3.Connection) -> None:
        """``journal_mode = WAL`` (kept in the file, so once per database is enough); it needs
        a moment of exclusive access, so it is retried while other processes open the file."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
                break
            except sqlite3.OperationalError as exc:
                if not is_locked(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.005 * (0.5 + random.random()))
        if mode != "wal":
            raise sqlite3.OperationalError(
                f"cannot use WAL mode (journal_mode stays {mode!r}); put the file on a local "
                "file system"
            )
        self._wal = False

    def close(self) -> None:
        """Close every connection this database opened, in any thread. Safe to call twice."""
        with self._conns_lock:
            self._closed = True
            conns, self._conns = list(self._conns.values()), {}
            shared, self._shared = self._shared, None
            self._shared_cursor = None
        if os.getpid() != self._pid:
            return
        if shared is not None:
            with self._lock:
                shared.close()
        for conn in conns:
            conn.close()

    # ----------------------------------------------------------------- transactions

    @property
    def writing(self) -> bool:
        """Whether this thread is inside :meth:`write` (a nested write joins that one)."""
        return bool(getattr(self._local, "depth", 0))

    def write(self) -> AbstractContextManager[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction, committed on success, rolled back on error.
        Inside another :meth:`write` of the same thread, the statements join its
        transaction (the outer one commits)."""
        return _Write(self)

    def write_cursor(self) -> AbstractContextManager[sqlite3.Cursor]:
        """:meth:`write` as this thread's own cursor (see :meth:`cursor`) instead of the
        connection: a writer that runs several statements saves making a cursor for each
        (read ``rowcount`` before the next statement)."""
        return _WriteCursor(self)

    @staticmethod
    def _rollback(cursor: sqlite3.Cursor) -> None:
        if cursor.connection.in_transaction:
            cursor.execute("ROLLBACK")

    def _begin(self, cursor: sqlite3.Cursor) -> None:
        """``BEGIN IMMEDIATE``, retried with jittered backoff while another process holds
        the write lock, until the busy timeout is spent."""
        deadline: float | None = None
        delay = 0.001
        while True:
            try:
                cursor.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not is_locked(exc):
                    self._raise(exc, "write")
                if deadline is None:  # first refusal: the busy timeout starts now
                    deadline = time.monotonic() + self.timeout
                elif time.monotonic() >= deadline:
                    self._raise(exc, "locked")
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.1)

    def run(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """One statement in its own (implicit) transaction, queued behind this process's
        other writers: a single ``INSERT`` costs one statement instead of three. Errors of
        the statement itself come back through ``fail`` as ``"write"``. Runs on this
        thread's own cursor (:meth:`cursor`), which it returns."""
        cursor = self.cursor()
        with self._lock:
            try:
                return cursor.execute(sql, params)
            except (sqlite3.Error, UnicodeEncodeError) as exc:
                self._raise(exc, "write")

    def script(self, sql: str) -> None:
        """A script of statements (a schema's ``CREATE ... IF NOT EXISTS``), run outside any
        transaction (``executescript`` commits first) and queued behind this process's
        writers. Errors come back through ``fail`` as ``"write"``."""
        conn = self.connection()
        with self._lock:
            try:
                conn.executescript(sql)
            except sqlite3.Error as exc:
                self._raise(exc, "write")

    @contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """This thread's connection for reading (``":memory:"``: held under the lock).
        ``snapshot`` wraps the reads in one transaction, so they see one state of the file."""
        if not self.memory and not snapshot:
            yield self.connection()
            return
        with self._lock if self.memory else _NO_LOCK:
            conn = self.connection()
            begin = snapshot and not conn.in_transaction
            if begin:
                conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if begin:
                    conn.execute("COMMIT")

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """All rows of one query. WAL readers do not wait on writers: "locked" here means
        WAL recovery by another process, which is brief, so it is retried until the busy
        timeout; other errors come back through ``fail`` as ``"read"``."""
        if self.memory:
            with self._lock:
                return self._rows(self.connection(), sql, params)
        return self._rows(self.connection(), sql, params)

    def _rows(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
        deadline: float | None = None
        while True:
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if deadline is None:
                    deadline = time.monotonic() + self.timeout
                if not is_locked(exc) or time.monotonic() >= deadline:
                    self._raise(exc, "read")
                time.sleep(0.002)
            except (sqlite3.Error, UnicodeEncodeError) as exc:
                self._raise(exc, "read")


class _Transaction:
    """:meth:`Database.write`'s transaction as a plain context manager (every step commit of
    a run opens one: a generator-based one cost a third more than ``BEGIN`` and ``COMMIT``
    themselves). ``BEGIN`` and ``COMMIT`` run on the thread's own cursor (see
    :meth:`Database.cursor`)."""

    __slots__ = ("_cursor", "_db", "_lock", "_outer")

    def __init__(self, db: Database) -> None:
        self._db = db

    def _enter(self) -> sqlite3.Cursor:
        db = self._db
        cursor = self._cursor = db.cursor()
        local = db._local
        depth = self._outer = getattr(local, "depth", 0)
        if depth:  # joins the transaction of an outer write on this thread
            local.depth = depth + 1
            return cursor
        lock = self._lock = db._lock  # the one acquired is the one released (fork)
        lock.acquire()
        try:
            db._begin(cursor)
        except BaseException:
            lock.release()
            raise
        local.depth = 1
        return cursor

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        db, cursor = self._db, self._cursor
        if self._outer:
            db._local.depth = self._outer
            return
        try:
            db._local.depth = 0
            if exc is not None:
                db._rollback(cursor)
                # disk full, I/O error, a lone surrogate in a bound string ...: rolled back
                if isinstance(exc, sqlite3.Error | UnicodeEncodeError):
                    db._raise(exc, "write")
                return  # anything else propagates as it is
            try:
                cursor.execute("COMMIT")
            except sqlite3.Error as error:
                # WAL mode writes at COMMIT: a full disk or an I/O error shows up here.
                db._rollback(cursor)
                db._raise(error, "commit")
        finally:
            self._lock.release()


class _Write(_Transaction):
    """:meth:`Database.write`: the transaction, as the connection."""

    __slots__ = ()

    def __enter__(self) -> sqlite3.Connection:
        return self._enter().connection


class _WriteCursor(_Transaction):
    """:meth:`Database.write_cursor`: the transaction, as the thread's own cursor."""

    __slots__ = ()

    def __enter__(self) -> sqlite3.Cursor:
        return self._enter()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


_NO_LOCK: Final = _NoLock()
