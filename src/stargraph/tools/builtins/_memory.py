"""``choir.memory.query`` / ``.upsert`` (host-executed) and ``choir.memory.compact`` (local).

Memory is a :class:`MemoryStore`: entries in SQLite, each in a scope (``working``,
``session``, ``knowledge``), with a key, a sequence number, its content hash
(``sha256:<hex>``) and an embedding. One query tool covers the three access paths the seed
names, chosen by ``mode`` (tool surface minimisation):

* ``semantic`` -- the ``k`` entries closest in meaning to ``query`` (cosine over the
  store's embedder: :class:`~stargraph.skills.refs.embed.HashingEmbedder` by default,
  deterministic; a real model such as ``MiniLMEmbedder`` plugs in the same way);
* ``hash`` -- the entries whose content hash is ``hash`` (content addressing);
* ``range`` -- entries ``start`` .. ``end`` by sequence number (what was written when).

Each mode's arguments are checked before anything runs: a ``semantic`` query without
``query`` or with a ``hash`` is refused as invalid arguments, with nothing locked or
delegated. As in the seed, query and upsert are executed by the host (:class:`MemoryHost`
serves them) and compact runs locally ("force reference summary update": the oldest
entries of a scope are folded into the scope's summary entry).

Locks: the seed's table lists none for the memory tools, while its taxonomy puts
``memory.upsert`` among the writers that need an exclusive lock; we follow the taxonomy:
query takes ``memory:S``, upsert and compact ``memory:X``, so a query never sees a
half-done compaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import numpy as np
from pydantic import Field, model_validator

from stargraph._sqlite import Database
from stargraph._typed import TypedModel
from stargraph.errors import StoreError, ToolArgumentError, ToolError
from stargraph.plugin.hookspecs import hookimpl
from stargraph.tools._canonical import content_ref
from stargraph.tools._host import HostHandler, HostRequest, HostTool, host_tool
from stargraph.tools._result import ToolOutput
from stargraph.tools._tool import PythonTool, ToolContext, tool
from stargraph.tools.builtins._local import FROZEN, parse_host_args

# What stargraph.tools.builtins re-exports (it star-imports this module).
__all__ = [
    "MemoryCompactArgs",
    "MemoryEntry",
    "MemoryHost",
    "MemoryPlugin",
    "MemoryQueryArgs",
    "MemoryStore",
    "MemoryUpsertArgs",
    "memory_compact_tool",
    "memory_query",
    "memory_upsert",
]

Scope = Literal["working", "session", "knowledge"]
"""Which memory an entry lives in."""

_KEY = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$"
_HASH = r"^(sha256:)?[0-9a-f]{64}$"
_CLIP: Final = 160
_SUMMARY_LINES: Final = 200


class MemoryEntry(TypedModel):
    """One stored memory."""

    typed_error = ToolError

    model_config = FROZEN

    seq: int
    """Sequence number: increases with every write (a rewrite gets a new one)."""
    scope: Scope
    key: str
    """Unique within the scope; defaults to the start of the content hash."""
    text: str
    hash: str
    """``sha256:<hex>`` of the text."""
    kind: Literal["entry", "summary"] = "entry"


class MemoryStore:
    """Agent memory in one SQLite file (or ``":memory:"``); safe to share between threads.

    ``embedder`` (default ``HashingEmbedder(256)``) embeds every entry on write; the store
    remembers the embedder's name and refuses to open with another one, because vectors of
    two embedders cannot be compared.

    >>> store = MemoryStore()
    >>> entry, status = store.upsert("knowledge", "Paris is the capital of France.")
    >>> status, entry.seq
    ('created', 1)
    >>> [e.text for e, _ in store.semantic("capital of France", k=1)]
    ['Paris is the capital of France.']
    >>> store.close()
    """

    def __init__(self, path: str | Path = ":memory:", *, embedder: Any = None) -> None:
        if embedder is None:
            from stargraph.skills.refs.embed import HashingEmbedder

            embedder = HashingEmbedder(256)
        self.embedder = embedder
        # The shared SQLite layer: per-thread connections, WAL for a file, and writers of
        # other processes waited for up to the busy timeout instead of failing at once.
        self._db = Database(path)
        self._db.script(
            """
            CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS entries (
                seq INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL,
                key TEXT NOT NULL, text TEXT NOT NULL, hash TEXT NOT NULL,
                kind TEXT NOT NULL, vector BLOB NOT NULL, UNIQUE (scope, key));
            CREATE INDEX IF NOT EXISTS entries_hash ON entries (hash);
            """
        )
        with self._db.write() as conn:
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('embedder', ?)", (str(embedder.name),))
            (stored,) = conn.execute("SELECT value FROM meta WHERE name = 'embedder'").fetchone()
        if stored != embedder.name:
            self._db.close()
            raise StoreError(
                f"memory store {path} holds vectors of embedder {stored!r}, not "
                f"{embedder.name!r}; open it with that embedder or start a new store"
            )

    # ------------------------------------------------------------------ writing

    def upsert(
        self, scope: Scope, text: str, *, key: str | None = None, kind: str = "entry"
    ) -> tuple[MemoryEntry, Literal["created", "updated", "unchanged"]]:
        """Write ``text`` under ``key`` (default: its hash); a rewrite gets a new ``seq``."""
        digest = content_ref(text.encode())
        key = key or digest.removeprefix("sha256:")[:16]
        vector = np.asarray(self.embedder.embed([text])[0], dtype="<f4").tobytes()
        # The check and the write in one transaction: another process writing the same key
        # in between cannot make this call report "unchanged" for text it replaced.
        with self._db.write() as conn:
            old = conn.execute(
                "SELECT hash FROM entries WHERE scope = ? AND key = ?", (scope, key)
            ).fetchone()
            if old is not None and old[0] == digest:
                return _get(conn, scope, key), "unchanged"
            conn.execute("DELETE FROM entries WHERE scope = ? AND key = ?", (scope, key))
            conn.execute(
                "INSERT INTO entries (scope, key, text, hash, kind, vector) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (scope, key, text, digest, kind, vector),
            )
            return _get(conn, scope, key), "created" if old is None else "updated"

    def compact(self, scope: Scope, *, keep: int) -> dict[str, Any]:
        """Fold every entry of ``scope`` but the newest ``keep`` into the scope's summary
        entry (key ``summary:<scope>``), one clipped line per entry, after the previous
        summary's lines, in one transaction. Returns what it did."""
        with self._db.write() as conn:
            rows = conn.execute(
                "SELECT seq, text FROM entries WHERE scope = ? AND kind = 'entry' ORDER BY seq",
                (scope,),
            ).fetchall()
            folded = rows[: max(len(rows) - keep, 0)]
            if not folded:
                return {"scope": scope, "folded": 0, "kept": len(rows), "summary": None}
            previous = conn.execute(
                "SELECT text FROM entries WHERE scope = ? AND key = ?", (scope, f"summary:{scope}")
            ).fetchone()
            lines = previous[0].splitlines() if previous else []
            lines += [f"[{seq}] " + " ".join(text.split())[:_CLIP] for seq, text in folded]
            summary = "\n".join(lines[-_SUMMARY_LINES:])
            # Joins this transaction: the summary and the deletions commit together.
            entry, _ = self.upsert(scope, summary, key=f"summary:{scope}", kind="summary")
            conn.executemany("DELETE FROM entries WHERE seq = ?", [(s,) for s, _ in folded])
        return {
            "scope": scope,
            "folded": len(folded),
            "kept": len(rows) - len(folded),
            "summary": entry.hash,
        }

    # ------------------------------------------------------------------ reading

    def by_hash(self, digest: str, *, scope: Scope | None = None) -> list[MemoryEntry]:
        """Entries whose text hashes to ``digest`` (``sha256:<hex>`` or bare hex)."""
        digest = digest if digest.startswith("sha256:") else f"sha256:{digest}"
        return self._select("hash = ?", (digest,), scope, limit=100)

    def range(
        self, start: int, end: int | None = None, *, scope: Scope | None = None, limit: int = 10
    ) -> list[MemoryEntry]:
        """Entries with ``start <= seq <= end`` (no end: to the newest), oldest first."""
        return self._select(
            "seq >= ? AND seq <= ?", (start, end if end is not None else 2**62), scope, limit
        )

    def semantic(
        self, query: str, *, k: int = 5, scope: Scope | None = None
    ) -> list[tuple[MemoryEntry, float]]:
        """The ``k`` entries closest to ``query`` (cosine), best first, ties by ``seq``."""
        where, params = ("WHERE scope = ?", (scope,)) if scope else ("", ())
        rows = self._db.rows(
            f"SELECT seq, scope, key, text, hash, kind, vector FROM entries {where}", params
        )
        if not rows:
            return []
        matrix = np.stack([np.frombuffer(row[6], dtype="<f4") for row in rows])
        wanted = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        scores = matrix @ wanted
        order = sorted(range(len(rows)), key=lambda i: (-round(float(scores[i]), 6), rows[i][0]))
        return [(_entry(rows[i][:6]), round(float(scores[i]), 6)) for i in order[:k]]

    def entries(self, scope: Scope | None = None) -> list[MemoryEntry]:
        """Every entry (of ``scope``), oldest first."""
        return self._select("1 = 1", (), scope, limit=2**31)

    def _select(
        self, condition: str, params: tuple[Any, ...], scope: Scope | None, limit: int
    ) -> list[MemoryEntry]:
        if scope is not None:
            condition += " AND scope = ?"
            params += (scope,)
        rows = self._db.rows(
            "SELECT seq, scope, key, text, hash, kind FROM entries "
            f"WHERE {condition} ORDER BY seq LIMIT ?",
            (*params, limit),
        )
        return [_entry(row) for row in rows]

    def close(self) -> None:
        """Close the database."""
        self._db.close()


def _get(conn: sqlite3.Connection, scope: str, key: str) -> MemoryEntry:
    row = conn.execute(
        "SELECT seq, scope, key, text, hash, kind FROM entries WHERE scope = ? AND key = ?",
        (scope, key),
    ).fetchone()
    return _entry(row)


def _entry(row: Any) -> MemoryEntry:
    seq, scope, key, text, digest, kind = row
    return MemoryEntry(seq=seq, scope=scope, key=key, text=text, hash=digest, kind=kind)


# --------------------------------------------------------------------------- tools


class MemoryQueryArgs(TypedModel):
    """Search memory. mode 'semantic': entries closest in meaning to `query`; mode 'hash':
    the entries with content hash `hash`; mode 'range': entries `start`..`end` by sequence
    number. `scope` limits the search to working, session or knowledge memory."""

    typed_error = ToolArgumentError

    model_config = FROZEN

    mode: Annotated[Literal["semantic", "hash", "range"], Field(description="How to search.")]
    query: Annotated[
        str | None, Field(min_length=1, max_length=1000, description="semantic: what to find.")
    ] = None
    hash: Annotated[
        str | None, Field(pattern=_HASH, description="hash: 'sha256:<64 hex>' or the hex.")
    ] = None
    start: Annotated[int | None, Field(ge=1, description="range: first sequence number.")] = None
    end: Annotated[int | None, Field(ge=1, description="range: last sequence number.")] = None
    scope: Annotated[Scope | None, Field(description="Only this memory; default all.")] = None
    k: Annotated[int, Field(ge=1, le=50, description="At most this many entries.")] = 5

    @model_validator(mode="after")
    def _mode_fields(self) -> MemoryQueryArgs:
        wanted = {"semantic": {"query"}, "hash": {"hash"}, "range": {"start", "end"}}[self.mode]
        required = {"semantic": {"query"}, "hash": {"hash"}, "range": {"start"}}[self.mode]
        given = {f for f in ("query", "hash", "start", "end") if getattr(self, f) is not None}
        missing = sorted(required - given)
        extra = sorted(given - wanted)
        # ValueError is pydantic's protocol here: it becomes a ValidationError, which the
        # argument validator turns into a ToolArgumentError naming each field.
        if missing:
            raise ValueError(f"mode {self.mode!r} needs {missing}")
        if extra:
            raise ValueError(f"mode {self.mode!r} takes no {extra}")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")
        return self


class MemoryUpsertArgs(TypedModel):
    """Write to memory (knowledge by default): insert, or replace the entry with this key."""

    typed_error = ToolArgumentError

    model_config = FROZEN

    text: Annotated[str, Field(min_length=1, max_length=20_000, description="What to store.")]
    scope: Annotated[Scope, Field(description="Which memory.")] = "knowledge"
    key: Annotated[
        str | None, Field(pattern=_KEY, description="Entry key; default: its content hash.")
    ] = None


class MemoryCompactArgs(TypedModel):
    """Force a summary update: fold all but the newest `keep` entries of a memory scope into
    its summary entry."""

    typed_error = ToolArgumentError

    model_config = FROZEN

    scope: Annotated[Scope, Field(description="Which memory to compact.")] = "working"
    keep: Annotated[int, Field(ge=0, le=1000, description="Newest entries kept in full.")] = 20


memory_query: Final[HostTool] = host_tool(
    id="choir.memory.query@1.0.0",
    args_model=MemoryQueryArgs,
    side_effect="read",
    locks=("memory:S",),
    idempotent=True,
    timeout_s=15,
)
"""``choir.memory.query@1.0.0``: executed by the host (:class:`MemoryHost`)."""

memory_upsert: Final[HostTool] = host_tool(
    id="choir.memory.upsert@1.0.0",
    args_model=MemoryUpsertArgs,
    side_effect="write",
    locks=("memory:X",),
    timeout_s=15,
)
"""``choir.memory.upsert@1.0.0``: executed by the host (:class:`MemoryHost`)."""


def memory_compact_tool(store: MemoryStore) -> PythonTool:
    """``choir.memory.compact@1.0.0`` over ``store`` (a local tool)."""

    @tool(
        id="choir.memory.compact@1.0.0",
        side_effect="write",
        locks=("memory:X",),
        timeout_s=15,
        args_model=MemoryCompactArgs,
    )
    def memory_compact(ctx: ToolContext, args: MemoryCompactArgs) -> ToolOutput:
        """Force a summary update: fold all but the newest `keep` entries of a memory scope
        into its summary entry."""
        done = store.compact(args.scope, keep=args.keep)
        return ToolOutput(
            summary=f"{args.scope}: folded {done['folded']} entries, kept {done['kept']}",
            payload=done,
        )

    return memory_compact


class MemoryHost:
    """The host side of ``choir.memory.query`` and ``choir.memory.upsert`` over a store."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def handlers(self) -> Mapping[str, HostHandler]:
        """Handlers for :class:`~stargraph.tools.HostHandlers`."""
        return {"choir.memory.query": self.query, "choir.memory.upsert": self.upsert}

    def query(self, request: HostRequest) -> ToolOutput:
        """Serve one query (arguments already validated by the arbiter)."""
        args = parse_host_args(MemoryQueryArgs, request)
        if args.mode == "semantic":
            assert args.query is not None  # the mode validator requires it
            found = self.store.semantic(args.query, k=args.k, scope=args.scope)
            rows = [{**e.model_dump(), "score": score} for e, score in found]
        elif args.mode == "hash":
            assert args.hash is not None
            rows = [e.model_dump() for e in self.store.by_hash(args.hash, scope=args.scope)]
        else:
            assert args.start is not None
            entries = self.store.range(args.start, args.end, scope=args.scope, limit=args.k)
            rows = [e.model_dump() for e in entries]
        return ToolOutput(summary=f"{len(rows)} memories ({args.mode})", payload=rows)

    def upsert(self, request: HostRequest) -> ToolOutput:
        """Serve one write."""
        args = parse_host_args(MemoryUpsertArgs, request)
        entry, status = self.store.upsert(args.scope, args.text, key=args.key)
        return ToolOutput(
            summary=f"{status} {entry.scope}/{entry.key} (seq {entry.seq})",
            payload={"status": status, **entry.model_dump(exclude={"text"})},
        )


class MemoryPlugin:
    """Example plugin: the three memory tools over ``store``; :meth:`host` serves the two
    host-executed ones."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.compact = memory_compact_tool(store)

    def host(self) -> MemoryHost:
        """The host side for this plugin's store."""
        return MemoryHost(self.store)

    @hookimpl
    def register_tools(self, register: Any) -> None:
        """Register query, upsert and compact."""
        register(memory_query)
        register(memory_upsert)
        register(self.compact)
