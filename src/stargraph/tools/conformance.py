"""Conformance suites for the tool seams, importable by third-party implementations.

Call them from a test with a factory that returns a *fresh, empty* instance::

    def test_my_log_conforms(tmp_path):
        check_commit_log(lambda: MyCommitLog(tmp_path / "log"))

They raise ``AssertionError`` naming the broken property.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from stargraph.tools._artifacts import ArtifactStore
from stargraph.tools._canonical import GENESIS_HASH, canonical_json, content_ref, sha256_hex
from stargraph.tools._commit import CommitEntry, CommitHead, CommitLog

__all__ = ["check_artifact_store", "check_commit_log"]


def _expect(condition: bool, message: str) -> None:
    # Not ``assert``: the suite must also check under ``python -O``.
    if not condition:
        raise AssertionError(message)


def check_commit_log(make: Callable[[], CommitLog]) -> None:
    """An empty log verifies; appends are sealed, chained from 64 zeros, returned in order,
    each hashed as the sha256 of the canonical JSON of the record without its hash; ``head()``
    names the last record and ``verify_chain(expected_head=...)`` checks the log still
    reaches it; concurrent appends from many threads still form one valid chain."""
    log = make()
    _expect(isinstance(log, CommitLog), "does not implement the CommitLog protocol")
    _expect(len(log) == 0 and log.records() == [], "a fresh log must be empty")
    _expect(log.verify_chain() is None, "an empty log must verify")
    _expect(log.head() == CommitHead(seq=0, hash=GENESIS_HASH), "an empty head is (0, zeros)")

    entries = [
        CommitEntry(lane="core", tool="t.a@1.0.0", args_hash="a" * 64, status="success"),
        CommitEntry(
            kind="audit",
            lane="edge",
            tool="t.b@1.0.0",
            call_id="call_1",
            args_hash="b" * 64,
            status="error",
            artifact_ref="sha256:" + "c" * 64,
        ),
    ]
    sealed = [log.append(entry) for entry in entries]
    _expect([r.seq for r in sealed] == [1, 2], "seq must start at 1 and increase by 1")
    _expect(sealed[0].prev_hash == GENESIS_HASH, "genesis prev_hash must be 64 zeros")
    _expect(sealed[1].prev_hash == sealed[0].hash, "prev_hash must be the previous hash")
    for record in sealed:
        body = record.model_dump()
        claimed = body.pop("hash")
        _expect(
            sha256_hex(canonical_json(body)) == claimed,
            "hash must be the sha256 of the canonical JSON of the record without its hash",
        )
    _expect(log.records() == sealed, "records() must return what append() returned, in order")
    for record, entry in zip(sealed, entries, strict=True):
        fields = record.model_dump(include=set(CommitEntry.model_fields))
        _expect(CommitEntry(**fields) == entry, "a record must keep every field of its entry")
    head = log.head()
    _expect(head == CommitHead(seq=2, hash=sealed[1].hash), "head() must name the last record")
    _expect(log.verify_chain(expected_head=head) is None, "the log must reach its own head")
    beyond = CommitHead(seq=5, hash=sealed[1].hash)
    _expect(log.verify_chain(expected_head=beyond) == 3, "a head beyond the log: truncated")
    other = CommitHead(seq=2, hash="f" * 64)
    _expect(log.verify_chain(expected_head=other) == 2, "another hash at the head: rewritten")

    def writer(index: int) -> None:
        for n in range(25):
            log.append(
                CommitEntry(lane=f"l{index}", tool="t.c@1.0.0", args_hash=str(n), status="success")
            )

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _expect(len(log) == 102, "concurrent appends must all be kept")
    _expect(log.verify_chain() is None, "concurrent appends must form one valid chain")
    _expect([r.seq for r in log.records()] == list(range(1, 103)), "seq must be gapless under load")
    _expect(log.verify_chain(expected_head=head) is None, "an older head must still be reached")


def check_artifact_store(make: Callable[[], ArtifactStore]) -> None:
    """put/get round trip by content hash, idempotent puts, a ``LookupError`` for a missing ref."""
    store = make()
    _expect(isinstance(store, ArtifactStore), "does not implement the ArtifactStore protocol")
    data = b'{"big":"payload"}'
    ref = store.put(data)
    _expect(ref == content_ref(data), "the ref must be sha256:<hex> of the bytes")
    _expect(store.put(data) == ref, "storing the same bytes twice gives the same ref")
    _expect(store.get(ref) == data, "get must return the stored bytes")
    _expect(ref in store, "a stored ref must be contained")
    missing = content_ref(b"never stored")
    _expect(missing not in store, "an unknown ref must not be contained")
    try:
        store.get(missing)
    except LookupError:  # KeyError or stargraph's ArtifactNotFoundError
        pass
    else:
        raise AssertionError("get of an unknown ref must raise a LookupError")
