"""The arbiter's commit log: append-only and hash-chained (rows B9, D10).

Each record is ``{seq, kind, lane, tool, call_id, args_hash, status, artifact_ref, prev_hash,
hash}`` with ``hash = sha256(canonical_json(record without "hash"))`` and ``prev_hash`` the
previous record's hash (64 zeros for the first). Records are stored as their exact canonical
bytes, and verification also checks the bytes are canonical, so changing *any* stored byte
is detected, even one that decodes to the same JSON (``"a"`` vs ``"\\u0061"``).

No record holds arguments, results or secrets: only hashes and artifact references.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Literal, Protocol, runtime_checkable

import orjson
from pydantic import BaseModel, ConfigDict, Field

from stargraph.tools._canonical import GENESIS_HASH, canonical_json, sha256_hex

__all__ = [
    "CommitEntry",
    "CommitLog",
    "CommitRecord",
    "InMemoryCommitLog",
    "SqliteCommitLog",
    "seal",
    "verify_rows",
]

RecordKind = Literal["call", "audit"]


class CommitEntry(BaseModel):
    """What the arbiter appends; the log adds ``seq``, ``prev_hash`` and ``hash``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: RecordKind = Field("call", description="'call', or 'audit' for external effects.")
    lane: str = Field(description="Lane that made the call ('edge', 'core', ...).")
    tool: str = Field(description="Canonical tool id, or the unknown name asked for.")
    call_id: str | None = Field(None, description="The model's tool_call id, if any.")
    args_hash: str = Field(description="sha256 of the canonical JSON arguments.")
    status: str = Field(description="ToolStatus of the outcome.")
    artifact_ref: str | None = Field(None, description="Stored payload, if any.")


class CommitRecord(CommitEntry):
    """A sealed, chained record."""

    seq: int = Field(ge=1, description="1-based position in the log.")
    prev_hash: str = Field(description="Hash of the previous record (64 zeros for seq 1).")
    hash: str = Field(description="sha256 of this record's canonical JSON without 'hash'.")


_RECORD_KEYS: Final = frozenset(CommitRecord.model_fields)


def seal(entry: CommitEntry, *, seq: int, prev_hash: str) -> tuple[CommitRecord, bytes]:
    """Chain ``entry`` after ``prev_hash``: the record and its canonical stored bytes."""
    body: dict[str, Any] = dict(entry.__dict__)
    body["seq"] = seq
    body["prev_hash"] = prev_hash
    # A record holds only strings, small integers and nulls under fixed ASCII keys, for
    # which sorted orjson output *is* RFC 8785 (see canonical_json); this runs on every call.
    body["hash"] = sha256_hex(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))
    data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    # model_construct: every field was validated in ``entry`` or computed just above.
    return CommitRecord.model_construct(**body), data


def verify_rows(rows: Iterable[tuple[int, bytes]]) -> int | None:
    """First broken ``seq`` in ``(seq, stored bytes)`` rows in order, or ``None`` if intact.

    A row is broken when it does not decode, is not canonical, has other keys, is out of
    sequence, does not point at the previous hash, or its hash does not match its content.
    """
    expected_prev = GENESIS_HASH
    expected_seq = 1
    for seq, data in rows:
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            return expected_seq
        if (
            not isinstance(body, dict)
            or set(body) != _RECORD_KEYS
            or seq != expected_seq
            or body["seq"] != expected_seq
            or body["prev_hash"] != expected_prev
            or canonical_json(body) != bytes(data)
        ):
            return expected_seq
        claimed = body.pop("hash")
        if sha256_hex(canonical_json(body)) != claimed:
            return expected_seq
        expected_prev = claimed
        expected_seq += 1
    return None


@runtime_checkable
class CommitLog(Protocol):
    """Append-only, hash-chained log. ``stargraph.tools.conformance.check_commit_log`` is the
    suite any implementation must pass."""

    def append(self, entry: CommitEntry) -> CommitRecord:
        """Seal ``entry`` after the current head, store it, and return the record."""
        ...

    def records(self) -> list[CommitRecord]:
        """Every record, in ``seq`` order."""
        ...

    def verify_chain(self) -> int | None:
        """The first broken ``seq``, or ``None`` when the whole chain is intact."""
        ...

    def __len__(self) -> int:
        """Number of records."""
        ...


class InMemoryCommitLog:
    """The default commit log: canonical bytes in a list, guarded by a lock."""

    def __init__(self) -> None:
        self._rows: list[bytes] = []
        self._head = GENESIS_HASH
        self._lock = threading.Lock()

    def append(self, entry: CommitEntry) -> CommitRecord:
        """Seal and store ``entry``."""
        with self._lock:
            record, data = seal(entry, seq=len(self._rows) + 1, prev_hash=self._head)
            self._rows.append(data)
            self._head = record.hash
        return record

    def records(self) -> list[CommitRecord]:
        """Every record, in order (decoded from the stored bytes)."""
        with self._lock:
            rows = list(self._rows)
        return [CommitRecord.model_validate_json(row) for row in rows]

    def verify_chain(self) -> int | None:
        """First broken ``seq`` or ``None``."""
        with self._lock:
            rows = list(enumerate(self._rows, start=1))
        return verify_rows(rows)

    def __len__(self) -> int:
        return len(self._rows)


class SqliteCommitLog:
    """Commit log in a SQLite file (stdlib ``sqlite3``, WAL). Safe across threads and
    processes.

    Appends are optimistic: the head (seq, hash) is cached and the record is inserted in one
    statement. ``seq`` is the primary key, so if another process appended meanwhile the insert
    collides, the head is re-read and the append retried; a stale head can therefore never be
    chained to. That keeps an append at one SQLite statement instead of four.

    Triggers refuse ``UPDATE`` and ``DELETE`` so the table is append-only through SQL; a
    writer bypassing them is still caught by :meth:`verify_chain`.
    """

    _SCHEMA: Final = """
        CREATE TABLE IF NOT EXISTS commit_log (seq INTEGER PRIMARY KEY, record BLOB NOT NULL);
        CREATE TRIGGER IF NOT EXISTS commit_log_no_update BEFORE UPDATE ON commit_log
            BEGIN SELECT RAISE(ABORT, 'commit_log is append-only'); END;
        CREATE TRIGGER IF NOT EXISTS commit_log_no_delete BEFORE DELETE ON commit_log
            BEGIN SELECT RAISE(ABORT, 'commit_log is append-only'); END;
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE per append).
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode is durable against application crashes; an OS crash may
            # lose the last transactions but never corrupts the chain.
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(self._SCHEMA)
            self._head = self._read_head()

    def _read_head(self) -> tuple[int, str]:
        row = self._conn.execute(
            "SELECT seq, record FROM commit_log ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return (0, GENESIS_HASH) if row is None else (row[0], _hash_of(row[1]))

    def append(self, entry: CommitEntry) -> CommitRecord:
        """Seal ``entry`` after the head and insert it (retrying if another writer won)."""
        with self._lock:
            while True:
                seq, prev = self._head
                record, data = seal(entry, seq=seq + 1, prev_hash=prev)
                try:
                    self._conn.execute("INSERT INTO commit_log VALUES (?, ?)", (seq + 1, data))
                except sqlite3.IntegrityError:
                    self._head = self._read_head()  # another process appended first
                    continue
                self._head = (record.seq, record.hash)
                return record

    def records(self) -> list[CommitRecord]:
        """Every record in ``seq`` order."""
        with self._lock:
            rows = self._conn.execute("SELECT record FROM commit_log ORDER BY seq").fetchall()
        return [CommitRecord.model_validate_json(row[0]) for row in rows]

    def verify_chain(self) -> int | None:
        """First broken ``seq`` or ``None``."""
        with self._lock:
            rows = self._conn.execute("SELECT seq, record FROM commit_log ORDER BY seq").fetchall()
        return verify_rows((seq, bytes(data)) for seq, data in rows)

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._conn.execute("SELECT COUNT(*) FROM commit_log").fetchone()
        return int(count)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()


def _hash_of(data: bytes) -> str:
    try:
        value = orjson.loads(data)["hash"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        value = None
    if not isinstance(value, str):
        # Appending after a corrupt head would bless the corruption with a valid-looking
        # successor; still append (the log must not stop auditing) but chain to a marker
        # hash so verify_chain keeps pointing at the damage.
        return "corrupt:" + sha256_hex(bytes(data))
    return value
