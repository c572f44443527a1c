"""Node caching: serve a node's writes again when it runs on an input it has seen.

A node compiled with ``cache=CachePolicy(...)`` is wrapped here. Its cache key is the node's
own IR (so a changed node never hits an entry its old version made) and its input - the
canonical JSON of the state it receives, or what the policy's ``key`` function returns for
it. The lookup goes through the run's record (``ctx.record_call("cache", ...)``), so the
step record says whether it was a hit, a re-executed step makes the same decision, and the
entry's age is measured with the run's clock (``ctx.now()``, journaled) rather than the wall
clock. Replay serves a cached node's recorded writes, hit or not (it is stubbed like a
``must_stub`` node), so replay never depends on what a cache holds today.

Where entries live: a table of the run's database when the graph is compiled with a
``SqliteStore`` or a ``PostgresStore`` (so other processes and later runs share them),
otherwise memory owned by the ``MemoryStore`` object or, without a store, by the compiled
graph.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sqlite3
import threading
import weakref
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import orjson
import pydantic_core
from pydantic import BaseModel

from stargraph.ir import CachePolicyIR, FunctionNodeIR, content_hash

__all__ = [
    "CACHE_CALL",
    "MemoryNodeCache",
    "NodeCache",
    "PostgresNodeCache",
    "SqliteNodeCache",
    "cache_for",
    "cache_problems",
    "cached",
]

CACHE_CALL = "cache"
"""The kind of the journaled call that records a cached node's lookup in its step record."""


class NodeCache(Protocol):
    """Where cached node writes are kept: ``(writes, stored_at)`` by key."""

    def get(self, key: str) -> tuple[Any, str | None] | None:
        """The entry under ``key``: its JSON writes and ISO time stored, or None."""
        ...

    def put(self, key: str, writes: Any, at: str | None) -> None:
        """Keep ``writes`` (JSON) under ``key``, stored at ``at`` (ISO time, or None)."""
        ...


class MemoryNodeCache:
    """Entries in a dict: shared by the runs of one store object (or one compiled graph)."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[Any, str | None]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[Any, str | None] | None:
        """See :class:`NodeCache`."""
        with self._lock:
            return self._entries.get(key)

    def put(self, key: str, writes: Any, at: str | None) -> None:
        """See :class:`NodeCache`."""
        with self._lock:
            self._entries[key] = (writes, at)


class SqliteNodeCache:
    """Entries in a table of the store's SQLite database (a connection per call: a cached
    node is one worth sparing, and no connection outlives its call)."""

    _DDL = (
        "CREATE TABLE IF NOT EXISTS stargraph_node_cache "
        "(key TEXT PRIMARY KEY, writes BLOB NOT NULL, stored_at TEXT)"
    )

    def __init__(self, path: Path) -> None:
        self._path = path

    def _run(self, query: str, args: tuple[Any, ...]) -> Any:
        with contextlib.closing(
            sqlite3.connect(self._path, timeout=30, isolation_level=None)
        ) as conn:
            conn.execute(self._DDL)
            return conn.execute(query, args).fetchone()

    def get(self, key: str) -> tuple[Any, str | None] | None:
        """See :class:`NodeCache`."""
        row = self._run("SELECT writes, stored_at FROM stargraph_node_cache WHERE key = ?", (key,))
        return None if row is None else (orjson.loads(row[0]), row[1])

    def put(self, key: str, writes: Any, at: str | None) -> None:
        """See :class:`NodeCache`."""
        self._run(
            "INSERT OR REPLACE INTO stargraph_node_cache (key, writes, stored_at) VALUES (?, ?, ?)",
            (key, orjson.dumps(writes), at),
        )


class PostgresNodeCache:
    """Entries in a table of the store's PostgreSQL schema (a connection per call, as for
    SQLite)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def _run(self, query: str, args: tuple[Any, ...]) -> Any:
        from psycopg import sql

        table = sql.Identifier(self._store.schema, "node_cache")
        with self._store.connect() as conn:
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} "
                    "(key TEXT PRIMARY KEY, writes BYTEA NOT NULL, stored_at TEXT)"
                ).format(table)
            )
            return conn.execute(sql.SQL(query).format(table), args).fetchone()

    def get(self, key: str) -> tuple[Any, str | None] | None:
        """See :class:`NodeCache`."""
        row = self._run("SELECT writes, stored_at FROM {} WHERE key = %s", (key,))
        return None if row is None else (orjson.loads(bytes(row[0])), row[1])

    def put(self, key: str, writes: Any, at: str | None) -> None:
        """See :class:`NodeCache`."""
        self._run(
            "INSERT INTO {} (key, writes, stored_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET writes = EXCLUDED.writes, "
            "stored_at = EXCLUDED.stored_at RETURNING key",
            (key, orjson.dumps(writes), at),
        )


_BY_STORE: weakref.WeakKeyDictionary[Any, NodeCache] = weakref.WeakKeyDictionary()
_BY_STORE_LOCK = threading.Lock()


def cache_for(store: Any) -> NodeCache:
    """The node cache of a checkpoint store (or of a storeless compiled graph: ``None``)."""
    if store is None:
        return MemoryNodeCache()
    with _BY_STORE_LOCK:
        found = _BY_STORE.get(store)
        if found is None:
            path = getattr(store, "path", None)
            kind = type(store).__name__
            if kind == "SqliteStore" and isinstance(path, Path):
                found = SqliteNodeCache(path)
            elif kind == "PostgresStore" and callable(getattr(store, "connect", None)):
                found = PostgresNodeCache(store)
            else:
                found = MemoryNodeCache()
            _BY_STORE[store] = found
        return found


def _age(now: str, at: str) -> timedelta:
    return datetime.fromisoformat(now) - datetime.fromisoformat(at)


def _input_json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return pydantic_core.to_jsonable_python(value)


def cached(
    node: FunctionNodeIR,
    fn: Callable[..., Any],
    takes_ctx: bool,
    key_fn: Callable[[Any], Any] | None,
    cache: NodeCache,
) -> Callable[[Any, Any], Any]:
    """``fn`` (sync or async) behind the node's cache; the wrapper takes ``(state, ctx)``."""
    policy: CachePolicyIR = node.cache or CachePolicyIR()
    # The node's own behaviour, not the graph's: another node changing keeps entries valid.
    namespace = content_hash(node.model_dump(mode="json", exclude={"metadata"}))
    ttl = None if policy.ttl_s is None else timedelta(seconds=policy.ttl_s)

    def look(state: Any, ctx: Any) -> tuple[str, str | None, dict[str, Any]]:
        chosen = key_fn(state) if key_fn is not None else _input_json(state)
        key = content_hash({"node": namespace, "input": _input_json(chosen)})
        now = ctx.now().isoformat() if ttl is not None else None

        def lookup() -> dict[str, Any]:
            entry = cache.get(key)
            if entry is None:
                return {"hit": False}
            writes, at = entry
            if ttl is not None and (at is None or now is None or _age(now, at) > ttl):
                return {"hit": False}
            return {"hit": True, "writes": writes}

        # Only the lookup is journaled: the body runs outside it, so its own journaled
        # calls (a model's answer) are recorded and served as in any node.
        found: dict[str, Any] = ctx.record_call(CACHE_CALL, key, {"key": key}, lookup)
        if found["hit"]:
            ctx.emit({"cache": "hit", "node": node.id, "key": key})
        return key, now, found

    if inspect.iscoroutinefunction(inspect.unwrap(fn)):

        async def arun(state: Any, ctx: Any) -> Any:
            key, now, found = look(state, ctx)
            if found["hit"]:
                return found["writes"]
            writes = await (fn(state, ctx) if takes_ctx else fn(state))
            cache.put(key, _input_json(writes), now)
            return writes

        return functools.update_wrapper(arun, fn)

    def run(state: Any, ctx: Any) -> Any:
        key, now, found = look(state, ctx)
        if found["hit"]:
            return found["writes"]
        writes = fn(state, ctx) if takes_ctx else fn(state)
        cache.put(key, _input_json(writes), now)
        return writes

    return functools.update_wrapper(run, fn)


def cache_problems(ir: Any) -> tuple[list[Any], dict[str, Callable[[Any], Any]]]:
    """What is wrong with the graph's cache policies, and their key functions by node id."""
    from stargraph.errors import Problem
    from stargraph.refs import resolve_ref

    problems: list[Problem] = []
    keys: dict[str, Callable[[Any], Any]] = {}
    for i, node in enumerate(ir.nodes):
        policy = getattr(node, "cache", None)
        if policy is None or policy.key is None:
            continue
        try:
            keys[node.id] = resolve_ref(policy.key)
        except (ImportError, AttributeError) as exc:
            problems.append(
                Problem(
                    f"/nodes/{i}/cache/key",
                    f"node {node.id!r}'s cache key function {policy.key!r} cannot be imported: "
                    f"{exc}",
                    "define the key function at module level",
                )
            )
    return problems, keys
