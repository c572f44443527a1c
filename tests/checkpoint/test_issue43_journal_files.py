"""A journal file belongs to its database and to one incarnation of its run, and every byte
of it is under a checksum: a file of a deleted database, of another database or of an
earlier run with the same id is never served, and a damaged file raises
``CorruptCheckpointError`` instead of dropping or re-serving entries. A file cut short reads
as the file a crash at that moment would have left.

The files are found where the docs say they are, in the ``<database>-calls/`` folder."""

from __future__ import annotations

import random
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import JournalEntry, RunRecord, SqliteStore, StepRecord
from stargraph.checkpoint._lease import new_owner
from stargraph.errors import CorruptCheckpointError, NodeError
from stargraph.graph import END, START, Graph
from stargraph.runtime import CompiledGraph, RunContext

Journal = dict[int, list[JournalEntry]]
"""What a store serves of a run's journal: the entries of steps 1 and 2."""


def _new_run(store: SqliteStore, run_id: str = "r") -> None:
    store.create_run(
        RunRecord(run_id=run_id, graph_name="g", graph_hash="h", code_hash="c"),
        StepRecord(step=0),
    )


def _entry(step: int, seq: int, value: object) -> JournalEntry:
    return JournalEntry(step=step, node="n", seq=seq, kind="once", key="k", value=value)


def _journal(store: SqliteStore, run_id: str = "r") -> Journal:
    return {step: store.get_journal(run_id, step) for step in (1, 2)}


def _only_file(db: Path) -> Path:
    """The one journal file in the database's ``-calls`` folder."""
    (path,) = (db.parent / f"{db.name}-calls").iterdir()
    return path


def _delete_database(db: Path) -> None:
    """``rm -f runs.db*``: the database and its ``-wal`` and ``-shm`` files, not folders."""
    for path in db.parent.glob(f"{db.name}*"):
        if path.is_file():
            path.unlink()


def _delete_run(db: Path, run_id: str) -> None:
    """Delete a run as SQL would, its steps and journal rows with it."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
    conn.close()


def _history(
    store: SqliteStore, rng: random.Random, run_id: str = "r"
) -> list[tuple[int, Journal]]:
    """Journal a run: entries of step 1, its commit, entries of step 2 (one replaced), the
    step left running. Returns, after each write, the file's size and what it served then
    (the first: no file yet)."""
    seen = [(0, _journal(store, run_id))]

    def note() -> None:
        seen.append((_only_file(store.path).stat().st_size, _journal(store, run_id)))

    for seq in range(rng.randint(1, 3)):
        store.append_journal(run_id, _entry(1, seq, "x" * rng.randint(0, 60)))
        note()
    store.commit_step(run_id, StepRecord(step=1))
    note()
    for seq in range(rng.randint(2, 5)):
        store.append_journal(run_id, _entry(2, seq, {"receipt": f"r-{seq}", "n": seq}))
        note()
    store.append_journal(run_id, _entry(2, 1, "answer"), replace=True)
    note()
    return seen


def _write_and_read(store: SqliteStore, run_id: str = "r") -> Journal:
    """As the run's next owner: append one entry of step 2 under a new lease, read the
    journal back, and give the lease up."""
    owner = new_owner()
    store.acquire(run_id, owner)
    try:
        store.append_journal(run_id, _entry(2, 99, "after"))
        return _journal(store, run_id)
    finally:
        store.release(run_id, owner.token)


def test_issue43_journal_mutations_are_named_or_read_as_a_crash_left_them(
    tmp_path: Path,
) -> None:
    """500 seeded mutations of journal files: bit flips and overwritten spans anywhere raise
    CorruptCheckpointError on read and on the next append (the file left as it was);
    truncations at every kind of offset serve exactly what the file held after the last
    write that fits, and the next append goes on from there; files of a deleted database,
    of another database and of a deleted run of the same id are never served."""
    rng = random.Random(43)
    db = tmp_path / "runs.db"
    with SqliteStore(db) as store:
        _new_run(store)
        seen = _history(store, rng)
        store.set_status("r", "failed")
    path = _only_file(db)
    base = path.read_bytes()
    ends = [size for size, _ in seen]
    cases: list[str] = []
    with SqliteStore(db) as store:
        assert seen[-1] == (len(base), _journal(store)), "another store reads the same"

        def damaged(data: bytes, what: str) -> None:
            path.write_bytes(data)
            with pytest.raises(CorruptCheckpointError, match=r"run 'r'.*journal file.*damaged"):
                _journal(store)
            with pytest.raises(CorruptCheckpointError):
                _write_and_read(store)
            assert path.read_bytes() == data, f"{what}: the damaged file was changed"
            cases.append(what)

        for _ in range(300):
            at, bit = rng.randrange(len(base)), rng.randrange(8)
            data = bytearray(base)
            data[at] ^= 1 << bit
            damaged(bytes(data), f"bit {bit} of byte {at} flipped")
        for _ in range(50):
            at = rng.randrange(len(base))
            span = rng.randint(2, 24)
            garbage = bytes(rng.randrange(256) for _ in range(span))
            data = bytearray(base)
            data[at : at + span] = garbage[: len(base) - at]
            if bytes(data) != base:
                damaged(bytes(data), f"{span} bytes at {at} overwritten")
            else:
                cases.append("a span overwritten with itself")
        # Truncations: at 0, at and beside every write's end, and anywhere in between.
        offsets = sorted({0, *ends, *(e - 1 for e in ends[1:]), *(e + 1 for e in ends[:-1])})
        offsets += [rng.randrange(len(base)) for _ in range(100 - len(offsets))]
        assert len(offsets) == 100
        for cut in offsets:
            path.write_bytes(base[:cut])
            then = max((e for e in seen if e[0] <= cut), key=lambda e: e[0])[1]
            assert _journal(store) == then, f"cut at {cut}"
            after = {1: then[1], 2: [*then[2], _entry(2, 99, "after")]}
            assert _write_and_read(store) == after, f"cut at {cut}, then appended"
            cases.append(f"cut at {cut}")
    for case in range(50):
        _foreign(tmp_path / f"foreign-{case}", random.Random(case), case % 3)
        cases.append(f"foreign {case % 3}")
    assert len(cases) == 500


def _foreign(tmp: Path, rng: random.Random, kind: int) -> None:
    """A journal file that is not the run's, of one of three kinds, is never served, and the
    run's next owner starts a file of its own."""
    tmp.mkdir()
    run_id = f"run-{rng.randrange(10**6)}"
    db = tmp / "runs.db"
    with SqliteStore(db) as store:
        _new_run(store, run_id)
        old = _history(store, rng, run_id)[-1][1]
        store.set_status(run_id, "failed")
    assert any(old.values())
    stale_file = _only_file(db)  # named by the run id: the same name in any folder
    stale = stale_file.read_bytes()
    if kind == 0:  # a deleted database's folder, at a new database of the same path
        _delete_database(db)
        with SqliteStore(db) as store:
            _new_run(store, run_id)
    elif kind == 1:  # a file copied in from another database
        db = tmp / "other.db"
        with SqliteStore(db) as store:
            _new_run(store, run_id)
            store.append_journal(run_id, _entry(2, 0, "mine"))
            store.set_status(run_id, "failed")
    else:  # the run deleted and created again in the same database
        _delete_run(db, run_id)
        with SqliteStore(db) as store:
            _new_run(store, run_id)
    folder = db.parent / f"{db.name}-calls"
    folder.mkdir(exist_ok=True)
    (folder / stale_file.name).write_bytes(stale)
    with SqliteStore(db) as store:
        store.acquire(run_id, new_owner())  # as a resume: a run this store did not create
        assert _journal(store, run_id) == {1: [], 2: []}, f"kind {kind}: served"
        store.append_journal(run_id, _entry(2, 99, "after"))
        assert _journal(store, run_id) == {1: [], 2: [_entry(2, 99, "after")]}


def test_issue43_a_flipped_length_bit_mid_file_is_damage_not_a_torn_tail(tmp_path: Path) -> None:
    """Frame 3 of 10 with a bit of its length flipped, so that it seems to run past the end
    of the file: the nine entries after it are not dropped in silence."""
    db = tmp_path / "runs.db"
    sizes = []
    with SqliteStore(db) as store:
        _new_run(store)
        for seq in range(10):
            store.append_journal("r", _entry(1, seq, f"charge {seq}"))
            sizes.append(_only_file(db).stat().st_size)
        store.set_status("r", "failed")
    path = _only_file(db)
    data = bytearray(path.read_bytes())
    # The third entry starts where the second ended; its head starts with its length.
    data[sizes[1] + 3] ^= 0x40
    path.write_bytes(bytes(data))
    with SqliteStore(db) as store, pytest.raises(CorruptCheckpointError, match=r"byte \d+"):
        store.get_journal("r", 1)


def test_issue43_an_append_refused_on_a_damaged_file_leaves_no_descriptor_open(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    with SqliteStore(db) as store:
        _new_run(store)
        store.append_journal("r", _entry(1, 0, "a receipt"))
        store.set_status("r", "failed")
    path = _only_file(db)
    path.write_bytes(path.read_bytes().replace(b"a receipt", b"a receipT"))
    fds = Path("/proc/self/fd")
    with SqliteStore(db) as store:
        store.get_run("r")  # the store's own connection opened, before counting
        before = len(list(fds.iterdir()))
        for _ in range(20):
            with pytest.raises(CorruptCheckpointError):
                _write_and_read(store)
        assert len(list(fds.iterdir())) == before


def test_issue43_a_copied_in_file_is_ignored_and_the_owner_empties_it(tmp_path: Path) -> None:
    """A file of another database under the run's name serves nothing, and the run's next
    owner replaces it (the other database's entries are not kept behind the new ones)."""
    with SqliteStore(tmp_path / "a.db") as a, SqliteStore(tmp_path / "b.db") as b:
        for store, value in ((a, "a's receipt"), (b, "b's receipt")):
            _new_run(store)
            store.append_journal("r", _entry(1, 0, value))
            store.set_status("r", "failed")
        shutil.copy(_only_file(tmp_path / "a.db"), _only_file(tmp_path / "b.db"))
        assert b.get_journal("r", 1) == []
        b.acquire("r", new_owner())
        b.append_journal("r", _entry(1, 1, "b again"))
        assert b.get_journal("r", 1) == [_entry(1, 1, "b again")]
        assert b"a's receipt" not in _only_file(tmp_path / "b.db").read_bytes(), "emptied"
        assert a.get_journal("r", 1) == [_entry(1, 0, "a's receipt")], "a's own is intact"


def test_issue43_a_run_deleted_and_created_again_does_not_read_the_old_file(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    with SqliteStore(db) as store:
        _new_run(store)
        store.append_journal("r", _entry(1, 0, "the old run's receipt"))
        store.set_status("r", "failed")
    _delete_run(db, "r")
    with SqliteStore(db) as store:
        _new_run(store)
    with SqliteStore(db) as store:
        assert store.get_journal("r", 1) == []


def test_issue43_a_new_database_removes_the_journals_of_the_deleted_one(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with SqliteStore(db) as store:
        for run_id in ("a", "b"):
            _new_run(store, run_id)
            store.append_journal(run_id, _entry(1, 0, "old"))
            store.set_status(run_id, "failed")
    assert len(list((tmp_path / "runs.db-calls").iterdir())) == 2
    _delete_database(db)
    SqliteStore(db).close()
    assert not (tmp_path / "runs.db-calls").exists()


# ------------------------------------------------- the approval pattern of the issue


class Refund(BaseModel):
    """A refund that a person approves before it is paid."""

    amount: float = 0.0
    receipt: str = ""


BANK: list[str] = []
"""The payments made, as the bank sees them (each test starts it empty)."""
CRASH: list[bool] = []
"""Set: the node dies after paying, before its step commits."""


def _pay() -> str:
    BANK.append(f"receipt-{len(BANK) + 1}")
    return BANK[-1]


def approve_and_pay(state: Refund, ctx: RunContext) -> dict[str, Any]:
    """Ask, then pay through ``ctx.once``."""
    if not ctx.interrupt({"question": f"refund {state.amount:.2f} EUR?"}):
        return {}
    receipt = ctx.once("pay", _pay)
    if CRASH:
        raise ConnectionError("the process died before the step committed")
    return {"receipt": receipt}


def _refunds(store: SqliteStore) -> CompiledGraph[Refund]:
    graph = Graph("refund", state=Refund).with_node("approve_and_pay", approve_and_pay)
    edges = graph.with_edge(START, "approve_and_pay").with_edge("approve_and_pay", END)
    return edges.compile(store=store)


def _in_a_new_process(db: Path, run: Callable[[SqliteStore], Refund]) -> Refund:
    with SqliteStore(db) as store:
        return run(store)


def test_issue43_a_new_database_at_a_deleted_ones_path_pays_again(tmp_path: Path) -> None:
    """``rm -f runs.db*`` leaves the journal folder; a new database at the same path with
    the same run id makes the payment of its own run instead of being served the receipt
    of the deleted database's run."""
    db = tmp_path / "runs.db"
    BANK.clear()
    CRASH[:] = [True]
    try:
        with SqliteStore(db) as store:
            app = _refunds(store)
            app.invoke({"amount": 12.5}, run_id="refund-1")
            with pytest.raises(NodeError):
                app.resume("refund-1", response=True)  # paid, then died before the commit
    finally:
        CRASH.clear()
    assert BANK == ["receipt-1"]
    _delete_database(db)
    _in_a_new_process(db, lambda s: _refunds(s).invoke({"amount": 7.0}, run_id="refund-1"))
    done = _in_a_new_process(db, lambda s: _refunds(s).resume("refund-1", response=True))
    assert BANK == ["receipt-1", "receipt-2"], "the new run's payment was made"
    assert done.receipt == "receipt-2"
