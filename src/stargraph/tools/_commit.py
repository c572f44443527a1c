"""The arbiter's commit log: append-only and hash-chained.

Each record is ``{seq, kind, lane, tool, call_id, args_hash, status, artifact_ref, prev_hash,
hash}`` with ``hash = sha256(canonical_json(record without "hash"))`` and ``prev_hash`` the
previous record's hash (64 zeros for the first). Records are stored as their exact canonical
bytes, and verification also checks the bytes are canonical, so changing *any* stored byte
is detected, even one that decodes to the same JSON (``"a"`` vs ``"\\u0061"``).

No record holds arguments, results or secrets: only hashes and artifact references.

**What the chain proves, and the anchored head.** A hash chain alone proves that the records
form *a* chain; it cannot tell that records were removed from its end (the shorter chain is
valid), nor that someone rewrote a record and re-sealed every record after it (the hashes hold
no secret). Both need a reference to the head kept where the attacker cannot rewrite it:

* :meth:`CommitLog.head` gives the head ``(seq, hash)``. A caller that stores it elsewhere
  (a run's checkpoint, another database, a signed report) and later calls
  ``verify_chain(expected_head=...)`` detects any truncation below that head and any rewrite
  or re-sealing of the records up to it. Records appended after the stored head are not
  covered until a newer head is stored.
* :class:`SqliteCommitLog` also keeps an *anchor* in the file: a one-row table holding the
  head record, written by a trigger in the same transaction as each append, so
  :meth:`~SqliteCommitLog.verify_chain` catches a deleted tail that the anchor still names
  (a restored older copy of the table, rows deleted after dropping the triggers). Without a
  key, someone who knows the anchor can rewrite it too, so the unkeyed anchor is a guard
  against accidents and naive edits, not against a deliberate attacker.
* ``SqliteCommitLog(path, key=...)`` makes the anchor a keyed MAC (HMAC-SHA256) of the head
  record. Without the key nobody can produce a valid anchor for any head but one the log
  itself wrote, so truncation and re-sealing are detected. Not detected: replacing the whole
  file (or both tables) by an older copy, since that copy's anchor was once valid; keep
  an external head for that. The key must be given from the log's creation on: an
  unanchored log with records opened with a key is reported as unverifiable.

A log whose head cannot be vouched for (bad anchor, undecodable last row) keeps accepting
appends, so auditing never stops, but chains them to a marker hash, so ``verify_chain``
keeps pointing at the damage instead of a fresh record blessing it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, Protocol, runtime_checkable

import orjson
from pydantic import ConfigDict, Field, ValidationError

from stargraph._sqlite import Database
from stargraph._typed import TypedModel, validate_json_raw
from stargraph.errors import CommitLogCorruptError, ToolError
from stargraph.tools._canonical import GENESIS_HASH, canonical_json, sha256_hex
from stargraph.tools._result import built

__all__ = [
    "CommitEntry",
    "CommitHead",
    "CommitLog",
    "CommitRecord",
    "InMemoryCommitLog",
    "SqliteCommitLog",
    "seal",
    "verify_rows",
]

RecordKind = Literal["call", "audit"]


class CommitEntry(TypedModel):
    """What the arbiter appends; the log adds ``seq``, ``prev_hash`` and ``hash``."""

    typed_error = ToolError

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: RecordKind = Field("call", description="'call', or 'audit' for external effects.")
    lane: str = Field(description="Lane that made the call ('edge', 'core', ...).")
    tool: str = Field(description="Canonical tool id, or the unknown name asked for.")
    call_id: str | None = Field(None, description="The model's tool_call id, if any.")
    args_hash: str = Field(description="sha256 of the canonical JSON arguments.")
    status: str = Field(
        description=(
            "ToolStatus of the outcome, or 'late_success'/'late_error' for the real end of "
            "a body the caller stopped waiting for at its timeout."
        )
    )
    artifact_ref: str | None = Field(None, description="Stored payload, if any.")


class CommitRecord(CommitEntry):
    """A sealed, chained record."""

    seq: int = Field(ge=1, description="1-based position in the log.")
    prev_hash: str = Field(description="Hash of the previous record (64 zeros for seq 1).")
    hash: str = Field(description="sha256 of this record's canonical JSON without 'hash'.")


class CommitHead(TypedModel):
    """The head of a commit log: its last ``seq`` and that record's ``hash`` (``0`` and 64
    zeros when empty). Store it outside the log to detect truncation and re-sealing later
    with ``verify_chain(expected_head=...)``."""

    typed_error = ToolError

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = Field(ge=0, description="Seq of the last record (0 for an empty log).")
    hash: str = Field(description="Hash of the last record (64 zeros for an empty log).")


_RECORD_KEYS: Final = frozenset(CommitRecord.model_fields)
_RECORD_SET: Final = set(_RECORD_KEYS)
# A literal, built without validation so that importing tools does not build CommitHead's
# schema (tests pin that it equals its validated form).
_EMPTY: Final = CommitHead.model_construct(seq=0, hash=GENESIS_HASH)


def seal(entry: CommitEntry, *, seq: int, prev_hash: str) -> tuple[CommitRecord, bytes]:
    """Chain ``entry`` after ``prev_hash``: the record and its canonical stored bytes."""
    body = {
        "kind": entry.kind,
        "lane": entry.lane,
        "tool": entry.tool,
        "call_id": entry.call_id,
        "args_hash": entry.args_hash,
        "status": entry.status,
        "artifact_ref": entry.artifact_ref,
    }
    data = _seal_body(body, seq, prev_hash)
    # Every field was validated in ``entry`` or computed just above, in field order.
    return built(CommitRecord, body, _RECORD_SET), data


_HASH_AFTER: Final = b',"kind":'
"""In a record's sorted keys ``hash`` comes right before ``kind`` (after ``call_id``)."""


def _seal_body(body: dict[str, Any], seq: int, prev_hash: str) -> bytes:
    """Add ``seq``, ``prev_hash`` and ``hash`` to ``body`` (an entry's fields); return the
    record's canonical bytes."""
    body["seq"] = seq
    body["prev_hash"] = prev_hash
    # A record holds only strings, small integers and nulls under fixed ASCII keys, for
    # which sorted orjson output *is* RFC 8785 (see canonical_json); this runs on every call.
    unsealed = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    digest = body["hash"] = hashlib.sha256(unsealed).hexdigest()  # sha256_hex, inline
    # The stored bytes are those with the hash put in its sorted place, not a second dump:
    # an unescaped quote ends a JSON string, so ',"kind":' only ever occurs as the key.
    at = unsealed.find(_HASH_AFTER) + 1
    if not at:  # no entry's fields (every entry has a kind): dump the whole record
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return b'%s"hash":"%s",%s' % (unsealed[:at], digest.encode(), unsealed[at:])


def verify_rows(rows: Iterable[tuple[int, bytes]]) -> int | None:
    """First broken ``seq`` in ``(seq, stored bytes)`` rows in order, or ``None`` if intact.

    A row is broken when it does not decode, is not canonical, has other keys, is out of
    sequence, does not point at the previous hash, or its hash does not match its content.
    """
    expected_prev = GENESIS_HASH
    expected_seq = 1
    for seq, data in rows:
        if not isinstance(data, bytes | bytearray | memoryview):
            return expected_seq  # a TEXT or number row was never written by a log
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

    def head(self) -> CommitHead:
        """The last record's ``seq`` and ``hash`` (store it to verify against later)."""
        ...

    def verify_chain(self, *, expected_head: CommitHead | None = None) -> int | None:
        """The first broken ``seq``, or ``None`` when the whole chain is intact (and reaches
        ``expected_head`` unchanged, when given)."""
        ...

    def __len__(self) -> int:
        """Number of records."""
        ...


def _check_expected_head(rows: Sequence[bytes], expected: CommitHead | None) -> int | None:
    """Where verified ``rows`` stop matching ``expected`` (a head stored earlier), or ``None``.

    The log may have grown since; it must still hold ``expected.seq`` records, the one at
    ``expected.seq`` with ``expected.hash``. A shorter log was truncated (the first missing
    ``seq`` is returned); another hash there means the records up to it were rewritten and
    re-sealed (``expected.seq`` is returned: the damage is at or before it).
    """
    if expected is None:
        return None
    if expected.seq > len(rows):
        return len(rows) + 1
    if expected.seq == 0:
        return None if expected.hash == GENESIS_HASH else 1
    return None if _hash_of(rows[expected.seq - 1]) == expected.hash else expected.seq


def _anchor_break(rows: Sequence[bytes], anchor: tuple[int, str] | None) -> int | None:
    """Where ``rows`` stop matching the head ``(seq, hash)`` the log itself recorded.

    ``None`` when they end exactly there; the first missing ``seq`` when the tail is gone;
    the first unanchored ``seq`` when rows were added behind the anchor's back; the last
    ``seq`` when the last record differs from the anchored one or no anchor exists.
    """
    count = len(rows)
    if anchor is None:
        return count or None
    seq, claimed = anchor
    if seq > count:
        return count + 1
    if seq < count:
        return seq + 1
    if count and _hash_of(rows[-1]) != claimed:
        return count
    return None


def _first(*candidates: int | None) -> int | None:
    found = [seq for seq in candidates if seq is not None]
    return min(found) if found else None


class InMemoryCommitLog:
    """The default commit log: canonical bytes in a list, guarded by a lock."""

    def __init__(self) -> None:
        self._rows: list[bytes] = []
        self._head = GENESIS_HASH
        self._anchor_seq = 0
        self._lock = threading.Lock()

    def append(self, entry: CommitEntry) -> CommitRecord:
        """Seal and store ``entry``."""
        with self._lock:
            record, data = seal(entry, seq=len(self._rows) + 1, prev_hash=self._head)
            self._rows.append(data)
            self._head = record.hash
            self._anchor_seq = record.seq
        return record

    def records(self) -> list[CommitRecord]:
        """Every record, in order (decoded from the stored bytes)."""
        with self._lock:
            rows = list(self._rows)
        return [CommitRecord.model_validate_json(row) for row in rows]

    def head(self) -> CommitHead:
        """The last record's ``seq`` and ``hash``."""
        with self._lock:
            return CommitHead(seq=len(self._rows), hash=self._head)

    def verify_chain(self, *, expected_head: CommitHead | None = None) -> int | None:
        """First broken ``seq`` or ``None``; the rows must also still end at the head this
        log last appended (its in-process anchor) and reach ``expected_head``."""
        with self._lock:
            rows = list(self._rows)
            anchor = (self._anchor_seq, self._head)
        return _first(
            verify_rows(enumerate(rows, start=1)),
            _anchor_break(rows, anchor),
            _check_expected_head(rows, expected_head),
        )

    def __len__(self) -> int:
        return len(self._rows)


class SqliteCommitLog:
    """Commit log in a SQLite file (through the shared SQLite layer ``stargraph._sqlite``:
    WAL, a connection per thread). Safe across threads and processes.

    Appends are optimistic: the head (seq, hash) is cached and the record is inserted in one
    statement. ``seq`` is the primary key, so if another process appended meanwhile the insert
    collides, the head is re-read and the append retried; a stale head can therefore never be
    chained to. That keeps an append at one SQLite statement instead of four.

    Triggers refuse ``UPDATE`` and ``DELETE`` so the table is append-only through SQL; a
    writer bypassing them is still caught by :meth:`verify_chain`. Another trigger keeps the
    head anchor (``commit_log_head``) in the same transaction as each insert; with ``key``
    the anchor is an HMAC only the key's holder can produce (see the module docstring for
    exactly what each variant detects). Inserting needs the log's own SQL function, so a
    plain ``sqlite3`` shell cannot append behind the anchor's back either.
    """

    _SCHEMA: Final = (
        "CREATE TABLE IF NOT EXISTS commit_log (seq INTEGER PRIMARY KEY, record BLOB NOT NULL)",
        """CREATE TRIGGER IF NOT EXISTS commit_log_no_update BEFORE UPDATE ON commit_log
            BEGIN SELECT RAISE(ABORT, 'commit_log is append-only'); END""",
        """CREATE TRIGGER IF NOT EXISTS commit_log_no_delete BEFORE DELETE ON commit_log
            BEGIN SELECT RAISE(ABORT, 'commit_log is append-only'); END""",
        """CREATE TABLE IF NOT EXISTS commit_log_head (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            seq INTEGER NOT NULL,
            record BLOB NOT NULL,
            mac BLOB
        )""",
        """CREATE TRIGGER IF NOT EXISTS commit_log_anchor AFTER INSERT ON commit_log
            BEGIN
                INSERT OR REPLACE INTO commit_log_head
                VALUES (1, NEW.seq, NEW.record, stargraph_commit_mac(NEW.seq, NEW.record));
            END""",
    )

    def __init__(self, path: str | os.PathLike[str], *, key: bytes | None = None) -> None:
        self.path = str(path)
        self._key = key
        # The head cache below is read and advanced as one step per append.
        self._lock = threading.Lock()
        # Every connection (one per thread) gets the anchor trigger's MAC function.
        self._db = Database(
            self.path,
            on_connect=lambda conn: conn.create_function(
                "stargraph_commit_mac", 2, self._mac, deterministic=True
            ),
        )
        with self._lock:
            with self._db.write() as conn:
                anchored = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                    ("commit_log_head",),
                ).fetchone()
                for statement in self._SCHEMA:
                    conn.execute(statement)
                if anchored is None and key is None:
                    # A log written before anchors existed: anchor its current head (trust
                    # on first use). A keyed log must be keyed from its creation on.
                    conn.execute(
                        "INSERT INTO commit_log_head SELECT 1, seq, record, NULL FROM "
                        "commit_log ORDER BY seq DESC LIMIT 1"
                    )
            self._head = self._read_head()

    def _mac(self, seq: int, record: object) -> bytes | None:
        if self._key is None:
            return None
        if not isinstance(record, bytes):
            record = str(record).encode("utf-8", "surrogatepass")
        message = b"stargraph-commit-head\x00%d\x00" % seq + record
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def _snapshot(self, everything: bool) -> tuple[list[tuple[Any, Any]], Any]:
        """The rows (all, or only the last) and the anchor row, from one read transaction."""
        sql = "SELECT seq, record FROM commit_log ORDER BY seq"
        if not everything:
            sql += " DESC LIMIT 1"
        with self._db.read(snapshot=True) as conn:
            rows = conn.execute(sql).fetchall()
            anchor = conn.execute(
                "SELECT seq, record, mac FROM commit_log_head WHERE id = 1"
            ).fetchone()
        return rows, anchor

    def _vouched(self, anchor: Any) -> tuple[int, str] | None:
        """The anchored ``(seq, hash)`` if the anchor is intact (and keyed right), else None."""
        if anchor is None:
            return None
        seq, record, mac = anchor
        if not isinstance(record, bytes) or not isinstance(seq, int):
            return None
        if self._key is not None:
            expected = self._mac(seq, record)
            if not isinstance(mac, bytes) or not hmac.compare_digest(mac, expected or b""):
                return None
        return seq, _hash_of(record)

    def _read_head(self) -> tuple[int, str]:
        rows, anchor = self._snapshot(everything=False)
        if anchor is None and not rows:
            return 0, GENESIS_HASH
        seq, data = rows[0] if rows else (0, b"")
        vouched = self._vouched(anchor)
        head = _hash_of(data) if rows else GENESIS_HASH
        if vouched is None or vouched != (seq, head):
            # The anchor does not vouch for the last row (tail removed, rows added behind
            # its back, a forged or unkeyed anchor): chain to a marker, not to that row.
            return seq, "corrupt:anchor:" + sha256_hex(repr((seq, head, anchor)).encode())
        return seq, head

    def append(self, entry: CommitEntry) -> CommitRecord:
        """Seal ``entry`` after the head and insert it (retrying if another writer won)."""
        with self._lock:
            while True:
                seq, prev = self._head
                record, data = seal(entry, seq=seq + 1, prev_hash=prev)
                try:
                    self._db.run("INSERT INTO commit_log VALUES (?, ?)", (seq + 1, data))
                except sqlite3.IntegrityError:
                    self._head = self._read_head()  # another process appended first
                    continue
                self._head = (record.seq, record.hash)
                return record

    def head(self) -> CommitHead:
        """The last stored record's ``seq`` and ``hash`` (read from the file, so appends by
        other processes count). Raises :class:`CommitLogCorruptError` when that row is not a
        sealed record; whether the anchor vouches for it is :meth:`verify_chain`'s job."""
        with self._lock:
            rows, _anchor = self._snapshot(everything=False)
        if not rows:
            return _EMPTY
        seq, data = rows[0]
        claimed = _hash_of(data)
        if claimed.startswith("corrupt:"):
            raise self._corrupt(seq, data, "so the log's head cannot be read")
        return CommitHead(seq=seq, hash=claimed)

    def records(self) -> list[CommitRecord]:
        """Every record in ``seq`` order.

        Raises :class:`CommitLogCorruptError` naming the first row (``seq``) that is not a
        sealed record; :meth:`verify_chain` still reports where the chain breaks.
        """
        rows = self._db.rows("SELECT seq, record FROM commit_log ORDER BY seq")
        out = []
        for seq, data in rows:
            if not isinstance(data, bytes):
                raise self._corrupt(seq, data, "")
            try:
                out.append(validate_json_raw(CommitRecord, data))
            except ValidationError as exc:
                raise self._corrupt(seq, data, f"({exc.error_count()} validation errors)") from None
        return out

    def _corrupt(self, seq: object, data: object, why: str) -> CommitLogCorruptError:
        kind = "BLOB" if isinstance(data, bytes) else type(data).__name__.upper()
        detail = f"holds a {kind} value that is not a sealed commit record"
        return CommitLogCorruptError(
            f"commit log {self.path!r}: row seq={seq!r} of table commit_log {detail}"
            f"{' ' + why if why else ''}; records before it are intact if verify_chain() "
            f"points at it (fix: restore the file from a backup; do not write the table "
            f"except through SqliteCommitLog)"
        )

    def verify_chain(self, *, expected_head: CommitHead | None = None) -> int | None:
        """First broken ``seq`` or ``None``.

        Broken means: a row that is no canonical, correctly chained record; rows that do not
        end exactly at the head the anchor names (or an anchor that is missing, or whose MAC
        does not match under ``key``); or, given ``expected_head``, a log that no longer
        holds that head unchanged. Never raises for damaged rows.
        """
        with self._lock:
            rows, anchor = self._snapshot(everything=True)
        data = [record for _seq, record in rows]
        vouched = self._vouched(anchor)
        if vouched is None:
            # No anchor, or one that fails its check: the head is unconfirmed.
            unanchored = (len(rows) or 1) if anchor is not None or rows else None
        else:
            unanchored = _anchor_break(data, vouched)
        return _first(verify_rows(rows), unanchored, _check_expected_head(data, expected_head))

    def __len__(self) -> int:
        ((count,),) = self._db.rows("SELECT COUNT(*) FROM commit_log")
        return int(count)

    def close(self) -> None:
        """Close the connections."""
        self._db.close()


def _hash_of(data: object) -> str:
    """The ``hash`` a stored row claims, or a ``corrupt:`` marker for anything else."""
    value = None
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            body = None
        if isinstance(body, dict):
            value = body.get("hash")
        raw = bytes(data)
    else:
        # Only BLOBs are ever written; a TEXT or number row is damage, whatever it says.
        raw = repr(data).encode("utf-8", "backslashreplace")
    if not isinstance(value, str):
        # Appending after a corrupt head would bless the corruption with a valid-looking
        # successor; still append (the log must not stop auditing) but chain to a marker
        # hash so verify_chain keeps pointing at the damage.
        return "corrupt:" + sha256_hex(raw)
    return value
