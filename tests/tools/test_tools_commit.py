"""Commit log (B9, D10), artifact stores and the canonical JSON they hash."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from stargraph.errors import CorruptCheckpointError
from stargraph.tools import (
    GENESIS_HASH,
    CommitEntry,
    DirectoryArtifactStore,
    InMemoryArtifactStore,
    InMemoryCommitLog,
    SqliteCommitLog,
    canonical_json,
)
from stargraph.tools.conformance import check_artifact_store, check_commit_log

# JSON values the orjson fast path claims to encode exactly like RFC 8785.
_plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.text(st.characters(codec="utf-8")),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(max_codepoint=127), max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
# Values that must take the exact path: floats and non-ASCII keys.
_other = st.recursive(
    st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4) | st.integers(-5, 5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(_plain)
def test_fast_canonical_json_equals_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@given(_other)
def test_canonical_json_with_floats_and_unicode_keys_equals_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_astral_keys_sort_by_utf16_as_rfc8785_requires() -> None:
    value = {"\U0001f600": 1, "\uff61": 2}
    assert canonical_json(value) == rfc8785.dumps(value)
    # UTF-16 puts the surrogate pair (0xD83D...) before U+FF61; code-point order would not.
    encoded = canonical_json(value)
    assert encoded.index("\U0001f600".encode()) < encoded.index("\uff61".encode())


# --------------------------------------------------------------------------- conformance


def test_in_memory_commit_log_conforms() -> None:
    check_commit_log(InMemoryCommitLog)


def test_sqlite_commit_log_conforms(tmp_path: Path) -> None:
    logs: list[SqliteCommitLog] = []

    def make() -> SqliteCommitLog:
        logs.append(SqliteCommitLog(tmp_path / f"log{len(logs)}.db"))
        return logs[-1]

    check_commit_log(make)
    for log in logs:
        log.close()


def test_in_memory_artifact_store_conforms() -> None:
    check_artifact_store(InMemoryArtifactStore)


def test_directory_artifact_store_conforms(tmp_path: Path) -> None:
    check_artifact_store(lambda: DirectoryArtifactStore(tmp_path / "artifacts"))


def test_directory_store_reports_an_edited_file(tmp_path: Path) -> None:
    store = DirectoryArtifactStore(tmp_path)
    ref = store.put(b"original")
    digest = ref.removeprefix("sha256:")
    (tmp_path / digest[:2] / digest).write_bytes(b"edited")
    with pytest.raises(CorruptCheckpointError, match="does not match its hash"):
        store.get(ref)


# --------------------------------------------------------------------------- chain


def _entry(n: int) -> CommitEntry:
    return CommitEntry(
        lane="core", tool="t.x@1.0.0", call_id=f"c{n}", args_hash=str(n), status="success"
    )


def test_first_record_chains_from_64_zeros_and_hash_is_d10() -> None:
    log = InMemoryCommitLog()
    first = log.append(_entry(1))
    assert first.prev_hash == GENESIS_HASH == "0" * 64
    body = first.model_dump(exclude={"hash"})
    import hashlib

    assert first.hash == hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def test_sqlite_log_survives_reopen_and_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = SqliteCommitLog(path)
    log.append(_entry(1))
    log.close()
    again = SqliteCommitLog(path)
    second = again.append(_entry(2))
    assert second.seq == 2
    assert second.prev_hash == again.records()[0].hash
    assert again.verify_chain() is None
    again.close()


def test_sqlite_log_refuses_update_and_delete(tmp_path: Path) -> None:
    log = SqliteCommitLog(tmp_path / "log.db")
    log.append(_entry(1))
    log.close()
    conn = sqlite3.connect(tmp_path / "log.db")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE commit_log SET record = x'00'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM commit_log")
    conn.close()


def test_tampering_with_any_byte_of_a_stored_record_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = SqliteCommitLog(path)
    for n in range(1, 4):
        log.append(_entry(n))
    assert log.verify_chain() is None
    log.close()

    conn = sqlite3.connect(path, isolation_level=None)
    (original,) = conn.execute("SELECT record FROM commit_log WHERE seq = 2").fetchone()
    original = bytes(original)
    for index in range(len(original)):
        tampered = bytearray(original)
        tampered[index] ^= 0x01
        # An attacker with file access drops the trigger first (opening the log re-creates
        # it); the hash chain still catches the edit.
        conn.execute("DROP TRIGGER IF EXISTS commit_log_no_update")
        conn.execute("UPDATE commit_log SET record = ? WHERE seq = 2", (bytes(tampered),))
        reopened = SqliteCommitLog(path)
        assert reopened.verify_chain() == 2, f"flip of byte {index} went unnoticed"
        reopened.close()
    conn.execute("DROP TRIGGER IF EXISTS commit_log_no_update")
    conn.execute("UPDATE commit_log SET record = ? WHERE seq = 2", (original,))
    conn.close()
    intact = SqliteCommitLog(path)
    assert intact.verify_chain() is None
    intact.close()


def test_equivalent_but_non_canonical_bytes_are_tampering() -> None:
    log = InMemoryCommitLog()
    log.append(_entry(1))
    # Same JSON value, different bytes: "t" written as an escape.
    log._rows[0] = log._rows[0].replace(b'"t.x@1.0.0"', b'"\\u0074.x@1.0.0"')
    assert log.verify_chain() == 1


def test_reordering_deleting_or_rewriting_a_whole_record_is_detected() -> None:
    log = InMemoryCommitLog()
    for n in range(1, 5):
        log.append(_entry(n))
    rows = list(log._rows)
    log._rows[:] = [rows[0], rows[2], rows[1], rows[3]]
    assert log.verify_chain() == 2
    log._rows[:] = [rows[0], rows[1], rows[3]]
    assert log.verify_chain() == 3
    # A rewritten record with a correct own hash still breaks its successor's prev_hash.
    forged = InMemoryCommitLog()
    forged.append(_entry(1))
    forged.append(CommitEntry(lane="core", tool="evil.x@1.0.0", args_hash="2", status="success"))
    log._rows[:] = [rows[0], forged._rows[1], rows[2], rows[3]]
    assert log.verify_chain() == 3


def test_two_sqlite_writers_on_one_file_keep_one_chain(tmp_path: Path) -> None:
    # Two connections stand in for two processes: each caches its own head.
    first = SqliteCommitLog(tmp_path / "shared.db")
    second = SqliteCommitLog(tmp_path / "shared.db")
    for n in range(10):
        (first if n % 3 else second).append(_entry(n))
    assert [r.seq for r in first.records()] == list(range(1, 11))
    assert first.verify_chain() is None
    first.close()
    second.close()


def test_sealed_records_equal_what_model_construct_makes() -> None:
    # The same fields, the same fields set, the same bytes.
    from stargraph.tools._commit import CommitEntry, CommitRecord, seal

    entry = CommitEntry(lane="core", tool="t@1", args_hash="h", status="success")
    record, data = seal(entry, seq=1, prev_hash="0" * 64)
    expected = CommitRecord.model_construct(**record.__dict__)
    assert record == expected
    assert list(record.__dict__) == list(expected.__dict__)
    assert record.model_fields_set == expected.model_fields_set
    assert record.model_dump_json() == expected.model_dump_json()
    assert data == rfc8785.dumps(record.model_dump(mode="json"))
