"""A step commit on ``SqliteStore`` does no work twice: its statements and the journal's run
on the thread's own cursor, a journal row is compacted by itself, a step of one call is not
sorted, the tool messages' wording is imported once, and a commit that sets no status field
builds no ``extra`` column. Every row is stored as the general path stores it."""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import stargraph.checkpoint._compact as compact
import stargraph.checkpoint._records as records
import stargraph.checkpoint._sql as sql
import stargraph.runtime._durable as durable
from stargraph._sqlite import Database
from stargraph.checkpoint import JournalEntry, RunRecord, SqliteStore, StepRecord
from stargraph.checkpoint._codec import encode_extra
from stargraph.checkpoint._compact import compact_call, compact_calls, expand_steps
from stargraph.checkpoint._lease import new_owner
from stargraph.errors import CheckpointError
from stargraph.llm import ScriptedChatModel
from stargraph.skills.react import react_graph
from stargraph.tools import Arbiter, ToolRegistry
from tests.checkpoint.test_long_runs import ECHO, _script, echo
from tests.support import spy

CALLS = 4


class _Spy:
    """A cursor that notes the first word of every statement run on it."""

    def __init__(self, cursor: sqlite3.Cursor, seen: list[str]) -> None:
        self._cursor = cursor
        self._seen = seen

    @property
    def connection(self) -> sqlite3.Connection:
        return self._cursor.connection

    def execute(self, statement: str, params: Any = ()) -> Any:
        self._seen.append(statement.split(maxsplit=1)[0])
        self._cursor.execute(statement, params)
        return self

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    arbiter = Arbiter(ToolRegistry.build(builtins=[echo]), workspace=str(tmp_path / "ws"))
    yield arbiter
    arbiter.close()


def _react(store: Any, arbiter: Arbiter) -> list[StepRecord]:
    app = react_graph(tools=[ECHO], max_steps=CALLS + 5).compile(
        store=store,
        services={"model": ScriptedChatModel(_script(CALLS)), "arbiter": arbiter},
    )
    assert app.invoke({"task": "observe"}, run_id="r").final_answer == "finished"
    steps: list[StepRecord] = store.get_steps("r")
    return steps


def _new_run(store: SqliteStore) -> None:
    store.create_run(
        RunRecord(run_id="r", graph_name="g", graph_hash="h", code_hash="c"), StepRecord(step=0)
    )


def test_issue19_a_step_commit_and_a_journal_row_run_on_the_threads_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    own = Database.cursor

    def spied(db: Database) -> Any:
        return _Spy(own(db), seen)

    with SqliteStore(tmp_path / "r.db") as store:
        _new_run(store)
        monkeypatch.setattr(Database, "cursor", spied)
        entry = JournalEntry(step=1, node="n", seq=0, kind="now", key="k", value=1)
        store.append_journal("r", entry)
        store.commit_step("r", StepRecord(step=1))
        # Every statement went through the cursor: none made one of its own. The journal entry
        # is appended to the run's journal file, so the commit deletes nothing.
        assert seen == ["BEGIN", "UPDATE", "INSERT", "COMMIT"]
        monkeypatch.setattr(Database, "cursor", own)
        assert [s.step for s in store.get_steps("r")] == [0, 1]
        assert store.get_journal("r", 1) == []


def test_issue19_the_threads_cursor_is_one_per_thread_and_fences_as_before(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "t.db")
    cursor = db.cursor()
    assert db.cursor() is cursor
    assert db.connection() is cursor.connection
    with db.write_cursor() as writing:
        assert writing is cursor
        writing.execute("CREATE TABLE t (n INTEGER)")
    assert db.run("INSERT INTO t VALUES (1)") is cursor
    assert cursor.rowcount == 1
    db.close()
    # Two writers committing the same step: the second is refused, as before.
    with SqliteStore(tmp_path / "r.db") as store:
        _new_run(store)
        store.commit_step("r", StepRecord(step=1))
        with pytest.raises(CheckpointError, match="step 1 cannot follow committed step 1"):
            store.commit_step("r", StepRecord(step=1))
        owner = new_owner(30.0)
        store.acquire("r", owner)
        with pytest.raises(CheckpointError):
            store.commit_step("r", StepRecord(step=2), owner="someone else")
        store.commit_step("r", StepRecord(step=2), owner=owner.token)
        assert [s.step for s in store.get_steps("r")] == [0, 1, 2]


def test_issue19_a_memory_database_shares_one_cursor(tmp_path: Path) -> None:
    db = Database(":memory:")
    with db.write_cursor() as cursor:
        cursor.execute("CREATE TABLE t (n INTEGER)")
    assert db.cursor() is cursor
    db.run("INSERT INTO t VALUES (2)")
    assert db.rows("SELECT n FROM t") == [(2,)]
    db.close()
    with pytest.raises(sqlite3.ProgrammingError):
        db.cursor()


def test_issue19_a_journal_row_is_compacted_by_itself_as_before(
    tmp_path: Path, arbiter: Arbiter, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows: list[JournalEntry] = []
    written = SqliteStore.append_journal

    def noted(store: SqliteStore, run_id: str, entry: JournalEntry, **kw: Any) -> None:
        rows.append(entry)
        written(store, run_id, entry, **kw)

    monkeypatch.setattr(SqliteStore, "append_journal", noted)
    with SqliteStore(tmp_path / "r.db") as store:
        steps = _react(store, arbiter)
    # The calls as made (one task a step: journal order is record order), whole again.
    calls = [call for step in expand_steps(steps, {}) for call in step.calls]
    # Each row is what the general path makes of the call alone.
    conversations: compact.Conversations = {}
    assert len(rows) == len(calls) == 2 * CALLS + 1
    assert rows == [compact_calls((e,), conversations)[0] for e in calls]
    assert any(row.base for row in rows), "no model request was stored as a delta"
    # A delta worked out once for the journal row and the step's record is the same in both.
    shared: compact.Deltas = {}
    again: compact.Conversations = {}
    assert [compact_call(e, again, deltas=shared) for e in calls] == rows
    assert [compact_call(e, {}, deltas=shared) for e in calls] == [
        compact_call(e, {}) for e in calls
    ]


def test_issue19_compact_call_is_compact_calls_of_one_entry() -> None:
    first = {"messages": [{"role": "user", "content": "hi"}], "model": "m"}
    second = {"messages": [*first["messages"], {"role": "assistant", "content": "yo"}]}
    entries = [
        JournalEntry(step=1, node="n", seq=0, kind="llm", key="k", fingerprint="f1", request=first),
        JournalEntry(
            step=2, node="n", seq=0, kind="llm", key="k", fingerprint="f2", request=second
        ),
        JournalEntry(step=2, node="n", seq=1, kind="now", key="k", value=3),
    ]
    one: compact.Conversations = {}
    many: compact.Conversations = {}
    assert [compact_call(e, one) for e in entries] == list(compact_calls(entries, many))
    assert one == many
    assert compact_call(entries[1], {}) is entries[1]  # no earlier request: stored whole


def test_issue19_a_steps_calls_are_stored_by_task_and_sequence_number() -> None:
    def entry(node: str, index: int, seq: int) -> JournalEntry:
        return JournalEntry(step=1, node=node, index=index, seq=seq, kind="now", key="k")

    persistence = durable.Persistence.__new__(durable.Persistence)
    persistence._conversations, persistence._results = {}, {}
    persistence._deltas = {}
    single = entry("a", 0, 0)
    assert persistence._calls({("a", 0): [single]}) == (single,)
    one_task = [entry("a", 0, 2), entry("a", 0, 0), entry("a", 0, 1)]
    assert [e.seq for e in persistence._calls({("a", 0): one_task})] == [0, 1, 2]
    tasks = {("b", 0): [entry("b", 0, 1), entry("b", 0, 0)], ("a", 1): [entry("a", 1, 0)]}
    assert [(e.node, e.seq) for e in persistence._calls(tasks)] == [("a", 0), ("b", 0), ("b", 1)]


def test_issue19_the_tool_message_wording_is_imported_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tool = JournalEntry(
        step=1,
        node="act",
        seq=0,
        kind="tool",
        key="k",
        fingerprint="t1",
        request={"call_id": "c1", "lane": "core"},
        value={"message": "boom", "failure": {"kind": "bad"}},
    )
    compact._content_of(tool)  # imported here at the latest
    imports: list[str] = []
    real = builtins.__import__

    def noted(name: str, *args: Any, **kwargs: Any) -> Any:
        imports.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", noted)
    first = compact._content_of(tool)
    assert compact._content_of(tool) == first
    assert "stargraph.tools._recorded" not in imports


def test_issue19_a_commit_setting_no_status_field_builds_no_extra_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []
    general = encode_extra

    def counted(*args: Any, **kwargs: Any) -> bytes | None:
        built.append(args)
        return general(*args, **kwargs)

    with SqliteStore(tmp_path / "r.db") as store:
        _new_run(store)
        # Counted from here: what the commits build (create_run encodes its own status fields).
        monkeypatch.setattr(sql, "encode_extra", counted)
        store.commit_step("r", StepRecord(step=1))
        assert built == []
        store.commit_step("r", StepRecord(step=2), status="done", stopped_by="halt")
        assert len(built) == 1
        record = store.get_run("r")
        assert (record.status, record.stopped_by, record.error) == ("done", "halt", None)
        with sqlite3.connect(tmp_path / "r.db") as conn:
            (extra,) = conn.execute("SELECT extra FROM runs").fetchone()
        assert bytes(extra) == b'{"stopped_by":"halt"}'


def _old_iso_now(ns: int) -> str:
    """``iso_now`` as it was written before (the general path)."""
    second, nanos = divmod(ns, 1_000_000_000)
    micros = nanos // 1000
    prefix = datetime.fromtimestamp(second, UTC).isoformat()[:-6]
    return f"{prefix}.{micros:06d}+00:00" if micros else f"{prefix}+00:00"


def test_issue19_iso_now_formats_a_second_once_and_writes_the_same_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    formatted = spy(monkeypatch, records, "_prefix")
    base = 1_764_230_000 * 1_000_000_000
    times = [
        base,
        base + 999,  # under a microsecond: truncated to the whole second
        base + 1_000,
        base + 250_000_000,
        base + 999_999_999,
        base + 1_000_000_000,
        base + 1_000_001_000,
        base - 1,  # back in time (the clock was set back): the earlier second again
    ]
    for ns in times:
        monkeypatch.setattr(time, "time_ns", lambda ns=ns: ns)
        assert records.iso_now() == _old_iso_now(ns)
        assert records.iso_now() == datetime.fromtimestamp(ns // 1000 / 1e6, UTC).isoformat()
    # Each second formatted once while the clock stays in it (not once per stamp).
    assert formatted == [1_764_230_000, 1_764_230_001, 1_764_229_999]
