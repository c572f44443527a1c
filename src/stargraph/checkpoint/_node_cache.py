"""Node caches: where a store keeps the writes of cached nodes (the ``node_cache`` feature).

A store that declares ``"node_cache"`` in its ``features`` has ``node_cache()``, which
returns its :class:`NodeCache`: the same entries for every graph compiled with it (and, for
a database, for every process and store object on that database). :func:`node_cache_of`
is how the runtime takes it; any other store, or none, gets a new :class:`MemoryNodeCache`
that the compiled graph asking for it owns.

Entries are ``(writes, stored_at)`` by key: the node's JSON writes and the ISO time they
were stored (by the run's clock), or ``None`` for a policy without a time to live. A cache
is derived data: losing an entry costs a node's rerun, never a run's result, so the SQL
tables are made on first use instead of by a schema migration (an older stargraph opens
a database holding them unchanged).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

import orjson

from stargraph.checkpoint._protocol import features_of

if TYPE_CHECKING:
    from stargraph._sqlite import Database

__all__ = ["MemoryNodeCache", "NodeCache", "PostgresNodeCache", "SqliteNodeCache", "node_cache_of"]


class NodeCache(Protocol):
    """Where cached node writes are kept: ``(writes, stored_at)`` by key. Thread safe."""

    def get(self, key: str) -> tuple[Any, str | None] | None:
        """The entry under ``key``: its JSON writes and ISO time stored, or None."""
        ...

    def put(self, key: str, writes: Any, at: str | None) -> None:
        """Keep ``writes`` (JSON) under ``key``, stored at ``at`` (ISO time, or None),
        replacing what was there."""
        ...


class _CachingStore(Protocol):
    def node_cache(self) -> NodeCache: ...


def node_cache_of(store: object | None) -> NodeCache:
    """The node cache of ``store`` when it declares ``"node_cache"``, else a new in-memory
    one (for a store without the feature, or a graph compiled without a store): the caller
    owns it, so its entries live as long as the caller keeps it."""
    if store is not None and "node_cache" in features_of(store):
        return cast(_CachingStore, store).node_cache()
    return MemoryNodeCache()


class MemoryNodeCache:
    """Entries in a dict, as long as its owner (a ``MemoryStore``, a compiled graph) lives."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[bytes, str | None]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[Any, str | None] | None:
        """See :class:`NodeCache`."""
        with self._lock:
            found = self._entries.get(key)
        return None if found is None else (orjson.loads(found[0]), found[1])

    def put(self, key: str, writes: Any, at: str | None) -> None:
        """See :class:`NodeCache`."""
        # Kept encoded, as a database keeps them: what a caller does to the writes it put,
        # or to those a hit gave it, changes no entry.
        encoded = orjson.dumps(writes)
        with self._lock:
            self._entries[key] = (encoded, at)


_SQLITE_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS stargraph_node_cache "
    "(key TEXT PRIMARY KEY, writes BLOB NOT NULL, stored_at TEXT)"
)


class SqliteNodeCache:
    """Entries in the ``stargraph_node_cache`` table of a ``SqliteStore``'s file, through the
    store's own :class:`~stargraph._sqlite.Database` (its connections, its write queue, its
    typed errors)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        # One statement, not a script: a script would commit a write under way on this thread.
        db.run(_SQLITE_TABLE)

    def get(self, key: str) -> tuple[Any, str | None] | None:
        """See :class:`NodeCache`."""
        rows = self._db.rows(
            "SELECT writes, stored_at FROM stargraph_node_cache WHERE key = ?", (key,)
        )
        return None if not rows else (orjson.loads(rows[0][0]), rows[0][1])

    def put(self, key: str, writes: Any, at: str | None) -> None:
        """See :class:`NodeCache`."""
        self._db.run(
            "INSERT OR REPLACE INTO stargraph_node_cache (key, writes, stored_at) VALUES (?, ?, ?)",
            (key, orjson.dumps(writes), at),
        )


class PostgresNodeCache:
    """Entries in the ``node_cache`` table of a ``PostgresStore``'s schema, on the store's
    pooled connections. ``conn`` is the store's connection context (it maps driver errors
    to the store's typed ones); ``schema`` the quoted schema name."""

    def __init__(self, conn: Any, schema: str) -> None:
        self._conn = conn
        table = f"{schema}.node_cache"
        self._get = f"SELECT writes, stored_at FROM {table} WHERE key = %s"
        self._put = (
            f"INSERT INTO {table} (key, writes, stored_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET writes = EXCLUDED.writes, "
            "stored_at = EXCLUDED.stored_at"
        )
        # Two processes creating it at once may collide on the catalog's unique index even
        # with IF NOT EXISTS; the lock makes the second wait and then find it.
        with conn() as c, c.transaction():
            c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (table,))
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {table} "
                "(key TEXT PRIMARY KEY, writes BYTEA NOT NULL, stored_at TEXT)"
            )

    def get(self, key: str) -> tuple[Any, str | None] | None:
        """See :class:`NodeCache`."""
        with self._conn() as c:
            row = c.execute(self._get, (key,)).fetchone()
        return None if row is None else (orjson.loads(bytes(row[0])), row[1])

    def put(self, key: str, writes: Any, at: str | None) -> None:
        """See :class:`NodeCache`."""
        with self._conn() as c:
            c.execute(self._put, (key, orjson.dumps(writes), at))
