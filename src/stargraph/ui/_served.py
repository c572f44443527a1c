"""The model output in flight of runs that ``stargraph serve`` runs, in any process.

A server stores every item its runs stream, model tokens included, as numbered events in
``serve_events`` beside the checkpoints (``stargraph.serve._tables``), before anyone is sent
them. So the console, on the same database, reads a run's tokens as they are stored, whichever
process runs it: on PostgreSQL the server also notifies the store's channel with the run's id
for each token it stores, which wakes the run's page at once; on SQLite the page looks every
``poll_s``. A reply leaves this view once its step commits (the step's record has it whole).

Each API run is read from the event after the last one read (:class:`ServedText` keeps the
text so far per task), so a long run is not read again from its start on every token.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

from stargraph._sqlite import table_names
from stargraph.errors import RunNotFoundError, StargraphError
from stargraph.ui._live import Partial

__all__ = ["ServedText"]

_RETRY_S: Final = 5.0
"""How long the console waits before looking again for serve tables that were not there."""


@dataclass
class _Read:
    """What has been read of one API run: its last event's number, the text per task."""

    seq: int = -1
    texts: dict[tuple[str, int, str, int], str] = field(default_factory=dict)


def _locate(store: Any) -> tuple[str, str] | None:
    """``(database, schema)`` of ``store`` as ``open_tables`` takes them, or ``None`` for a
    store without serve tables (in memory, or a third-party store)."""
    from stargraph.checkpoint import PostgresStore, SqliteStore

    if isinstance(store, SqliteStore):
        return str(store.path), ""
    if isinstance(store, PostgresStore):
        return store.dsn, store.schema
    return None


def _sqlite_has_tables(path: str) -> bool:
    """Whether the SQLite file holds ``serve_events`` (read only: the console does not make
    a server's tables in a database no server used)."""
    try:
        return "serve_events" in table_names(path)
    except sqlite3.Error:
        return False


class ServedText:
    """Partial model replies of the runs a server runs on the console's database."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._where = _locate(store)
        self._lock = threading.Lock()
        self._tables: Any = None
        self._next_try = 0.0
        self._reads: dict[str, _Read] = {}

    def _open(self) -> Any:
        """The serve tables, once a server has made them (looked for again every few
        seconds until then); ``None`` without them."""
        if self._tables is not None or self._where is None:
            return self._tables
        now = time.monotonic()
        if now < self._next_try:
            return None
        self._next_try = now + _RETRY_S
        db, schema = self._where
        if not schema and not _sqlite_has_tables(db):
            return None
        from stargraph.serve._tables import open_tables

        try:
            self._tables = open_tables(db, schema=schema) if schema else open_tables(db)
        except StargraphError:
            return None  # no tables (or no right to make them): nothing served here
        except Exception:  # the database driver's own errors (a read-only role, say)
            return None
        return self._tables

    def of(self, run_id: str) -> list[Partial]:
        """The replies in flight shown on ``run_id``'s page: those of the run and of its
        child (skill) runs, in the steps that have not committed yet."""
        top = run_id.partition("::")[0]
        with self._lock:
            tables = self._open()
            if tables is None:
                return []
            try:
                active = tables.active_targeting(top)
                texts: dict[tuple[str, int, str, int], str] = {}
                for api_run in active:
                    texts.update(self._read(tables, api_run))
                for gone in set(self._reads) - set(active):
                    del self._reads[gone]
            except StargraphError:
                return []
        committed: dict[str, int] = {}
        out = []
        for (rid, step, node, index), text in sorted(texts.items()):
            if rid != run_id and not rid.startswith(run_id + "::") and run_id != top:
                continue
            if rid not in committed:
                try:
                    committed[rid] = self._store.get_run(rid).last_step
                except RunNotFoundError:
                    committed[rid] = -1
            if step > committed[rid]:
                out.append(Partial(rid, step, node, index, text))
        return out

    def started(self, run_id: str) -> tuple[str, str] | None:
        """``(thread id, assistant id)`` of the API run that started stargraph run
        ``run_id`` (its id is the run's), or ``None``: no server started it."""
        with self._lock:
            tables = self._open()
            if tables is None:
                return None
            try:
                row = tables.get_run(run_id)
            except StargraphError:
                return None
        if row is None or row.kind != "start" or row.target != run_id:
            return None
        return row.thread_id, row.assistant_id

    def _read(self, tables: Any, api_run: str) -> dict[tuple[str, int, str, int], str]:
        read = self._reads.setdefault(api_run, _Read())
        while True:
            events = tables.events_after(api_run, read.seq)
            for event in events:
                read.seq = event.seq
                if event.event == "messages":
                    _add(read.texts, event.data)
            if len(events) < 500:
                return read.texts

    def close(self) -> None:
        """Close the tables' connections."""
        with self._lock:
            if self._tables is not None:
                self._tables.close()
                self._tables = None


def _add(texts: dict[tuple[str, int, str, int], str], data: str) -> None:
    """Add one stored ``messages`` event (``[chunk, metadata]``, as the server sends it)."""
    try:
        chunk, meta = json.loads(data)
        rid, step, node = meta["run_id"], int(meta["langgraph_step"]), meta["langgraph_node"]
        index = int(str(chunk.get("id", "")).rpartition(":")[2] or 0)
        piece = chunk.get("content") or ""
    except (ValueError, TypeError, KeyError, AttributeError):
        return  # not a model chunk as this console knows them: not shown
    key = (str(rid), step, str(node), index)
    texts[key] = texts.get(key, "") + str(piece)
