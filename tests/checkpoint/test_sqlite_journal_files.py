"""``SqliteStore`` keeps the journal of a running step in a file a run beside the database:
an entry is one append, a commit one frame more, the file is compacted when large and goes
when the run is done; a frame cut short is dropped, a damaged one named; rows of the journal
table (``write_run``'s, earlier versions') still read; and what a SIGKILLed process journaled
is served to the resume instead of being done again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stargraph.checkpoint import JournalEntry, RunRecord, SqliteStore, StepRecord, _journal_files
from stargraph.checkpoint._lease import new_owner
from stargraph.errors import CorruptCheckpointError
from tests.checkpoint import callschild

ROOT = Path(__file__).resolve().parents[2]


def _new_run(store: SqliteStore, run_id: str = "r") -> None:
    store.create_run(
        RunRecord(run_id=run_id, graph_name="g", graph_hash="h", code_hash="c"),
        StepRecord(step=0),
    )


def _entry(step: int, seq: int = 0, value: object = 1, node: str = "n") -> JournalEntry:
    return JournalEntry(step=step, node=node, seq=seq, kind="once", key="k", value=value)


def _file(store: SqliteStore, run_id: str = "r") -> Path:
    return store._calls.path(run_id)


def test_the_file_lives_beside_the_database_while_the_run_runs(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        store.append_journal("r", _entry(1))
        path = _file(store)
        assert path.parent == tmp_path / "runs.db-calls"
        assert path.stat().st_size > 0
        store.commit_step("r", StepRecord(step=1))
        assert store.get_journal("r", 1) == []
        store.append_journal("r", _entry(2, value=2))
        assert store.get_journal("r", 2) == [_entry(2, value=2)]
        store.commit_step("r", StepRecord(step=2), status="done")
        assert not path.exists(), "a done run's file goes"
        assert not path.parent.exists(), "and the folder, when it was the last"


def test_a_run_that_stops_undone_keeps_its_file_for_the_resume(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        store.append_journal("r", _entry(1))
        store.set_status("r", "failed", error="boom")
        assert store.get_journal("r", 1) == [_entry(1)]
        assert _file(store).exists()
        store.set_status("r", "done")
        assert not _file(store).exists()


def test_commits_mark_entries_dead_and_a_large_file_is_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_journal_files, "COMPACT_AT", 2_000)
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        sizes = []
        for step in range(1, 30):
            store.append_journal("r", _entry(step, value="x" * 100))
            store.append_journal("r", _entry(step + 1, value="early"))  # the next step's
            store.commit_step("r", StepRecord(step=step))
            sizes.append(_file(store).stat().st_size)
            assert store.get_journal("r", step) == []
            assert store.get_journal("r", step + 1) == [_entry(step + 1, value="early")]
        assert max(sizes) < 2_000 + 400, "compacted once past COMPACT_AT"
        assert min(sizes) < 400, "down to the live entries"


def test_the_first_entry_stays_unless_replaced_across_stores(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store, SqliteStore(tmp_path / "runs.db") as other:
        _new_run(store)
        store.append_journal("r", _entry(1, value="first"))
        other.append_journal("r", _entry(1, value="second"))
        assert store.get_journal("r", 1) == [_entry(1, value="first")]
        other.append_journal("r", _entry(1, value="answer"), replace=True)
        assert store.get_journal("r", 1) == [_entry(1, value="answer")]


def test_a_frame_cut_short_is_dropped_and_cut_before_the_next_append(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        store.append_journal("r", _entry(1, seq=0))
        store.append_journal("r", _entry(1, seq=1, value=2))
        whole = _file(store).stat().st_size
        store.set_status("r", "failed")  # the process is gone: its file closed
    with _file(store).open("r+b") as file:
        file.truncate(whole - 3)  # the second frame, cut short by a crash
    with SqliteStore(tmp_path / "runs.db") as store:
        assert store.get_journal("r", 1) == [_entry(1, seq=0)]
        store.acquire("r", new_owner())
        store.append_journal("r", _entry(1, seq=1))
        assert store.get_journal("r", 1) == [_entry(1, seq=0), _entry(1, seq=1)]
        assert _file(store).stat().st_size == whole, "the torn frame was cut, not kept"


def test_a_damaged_frame_is_named_not_decoded(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        store.append_journal("r", _entry(1, seq=0, value="abc"))
        store.append_journal("r", _entry(1, seq=1))
        data = bytearray(_file(store).read_bytes())
        data[data.index(b"abc")] = ord("x")
        _file(store).write_bytes(bytes(data))
        with pytest.raises(CorruptCheckpointError, match=r"run 'r'.*journal file.*damaged"):
            store.get_journal("r", 1)


def test_rows_of_the_journal_table_read_beside_the_file(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        with store._write():  # inside a transaction (write_run's): a row of the table
            store.append_journal("r", _entry(1, seq=1, value="row"))
            store.append_journal("r", _entry(1, seq=2, value="row"))
        assert not _file(store).exists()
        store.append_journal("r", _entry(1, seq=0, value="file"))
        store.append_journal("r", _entry(1, seq=1, value="late"))  # the row came first
        store.append_journal("r", _entry(1, seq=2, value="answer"), replace=True)
        assert [e.value for e in store.get_journal("r", 1)] == ["file", "row", "answer"]
        store.commit_step("r", StepRecord(step=1))
        assert store.get_journal("r", 1) == []


def test_a_sigkilled_process_s_journaled_effect_is_not_done_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ledger = tmp_path / "bill.db", tmp_path / "ledger.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.checkpoint.callschild", str(db), str(ledger)],
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        # The child stops itself right after the journaled charge: wait for that, no polling.
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), proc.communicate()[1].decode()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert ledger.read_text() == "charged\n"
    monkeypatch.setenv("SG_LEDGER", str(ledger))
    with SqliteStore(db) as store:
        app = callschild.app(store)
        assert store.get_run(callschild.RUN_ID).last_step == 0, "the step never committed"
        assert app.resume(callschild.RUN_ID).receipt == "receipt-1"
        assert store.get_run(callschild.RUN_ID).status == "done"
        assert not store._calls.folder.exists()
    assert ledger.read_text() == "charged\n", "the resume was served the journaled charge"


def test_a_forked_child_appends_without_emptying_its_parents_file(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        _new_run(store)
        store.append_journal("r", _entry(1, seq=0))
        pid = os.fork()
        if pid == 0:  # the child: the run is one this store made, yet its file holds data
            code = 1
            try:
                store.append_journal("r", _entry(1, seq=1))
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status)
        assert os.WEXITSTATUS(status) == 0
        assert store.get_journal("r", 1) == [_entry(1, seq=0), _entry(1, seq=1)]
