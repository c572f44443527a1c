"""Records the executor builds without validation are the records validation would build;
compressed step rows read back, and a damaged one is named by run and step."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import MemoryStore, RunRecord, SqliteStore, StepRecord
from stargraph.checkpoint._codec import PACKED, unpack
from stargraph.errors import CorruptCheckpointError
from stargraph.graph import END, START, Graph
from tests.support import spy


class Notes(BaseModel):
    notes: Annotated[list[str], reducers.append] = []
    n: int = 0


def jot(state: Notes) -> dict[str, Any]:
    return {"notes": [f"note {state.n} " + "z" * 1800], "n": state.n + 1}


def again(state: Notes) -> str:
    return "jot" if state.n < 12 else END


GRAPH = (
    Graph("notes", state=Notes)
    .with_node("jot", jot)
    .with_edge(START, "jot")
    .with_conditional_edges("jot", again, ["jot", END])
)


def test_issue19_trusted_step_records_equal_validated_ones() -> None:
    store = MemoryStore()
    app = GRAPH.compile(store=store, snapshot_every=5)
    app.invoke({}, run_id="n")
    for step in store.get_steps("n"):
        assert set(step.__dict__) == set(StepRecord.model_fields)
        assert StepRecord.model_validate_json(step.model_dump_json()) == step


def test_issue19_compressed_step_rows_read_back_and_fail_their_checksum(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    with SqliteStore(path) as store:
        app = GRAPH.compile(store=store, snapshot_every=5)
        final = app.invoke({}, run_id="n")
        assert app.get_state("n") == final
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT step, payload FROM steps ORDER BY step").fetchall()
        packed = [step for step, payload in rows if bytes(payload)[:1] == b"("]
        assert packed, "a step over 1.5 KiB is stored compressed"
        step, payload = next((s, p) for s, p in rows if s == packed[-1])
        damaged = bytes(payload[:-3]) + bytes(b ^ 0xFF for b in payload[-3:])
        conn.execute("UPDATE steps SET payload = ? WHERE step = ?", (damaged, step))
    with (
        SqliteStore(path) as store,
        pytest.raises(CorruptCheckpointError, match=rf"run 'n' step {step}"),
    ):
        store.get_steps("n")


def test_issue19_step_rows_packed_with_the_old_32k_window_still_read_back(tmp_path: Path) -> None:
    """Rows are now packed as zstd frames; rows written before with ``zlib.compress`` (first
    byte ``x``) read back the same."""
    path = tmp_path / "n.db"
    with SqliteStore(path) as store:
        GRAPH.compile(store=store, snapshot_every=5).invoke({}, run_id="n")
        before = store.get_steps("n")
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT step, payload FROM steps ORDER BY step").fetchall()
        for step, payload in rows:
            raw = bytes(payload)
            text = unpack(raw) if raw[:1] in PACKED else raw
            old = zlib.compress(text, 1)
            assert old[:1] == b"x"
            conn.execute(
                "UPDATE steps SET payload = ?, crc = ? WHERE step = ?",
                (old, zlib.crc32(old), step),
            )
    with SqliteStore(path) as store:
        assert store.get_steps("n") == before


def test_issue19_memory_store_commits_without_rebuilding_the_run_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A commit to a ``MemoryStore`` notes the new last step and status; the frozen run
    record is rebuilt once, when it is next read, not at every step."""
    from stargraph.checkpoint import _memory

    store = MemoryStore()
    store.create_run(
        RunRecord(run_id="m", graph_name="g", graph_hash="h", code_hash="c"), StepRecord(step=0)
    )
    built = spy(monkeypatch, _memory, "trusted_fields")
    for step in range(1, 101):
        store.commit_step("m", StepRecord(step=step))
    assert built == []
    store.commit_step("m", StepRecord(step=101), status="done", stopped_by="rule/x")
    run = store.get_run("m")
    assert (run.last_step, run.status, run.stopped_by) == (101, "done", "rule/x")
    assert run.updated_at >= run.created_at
    assert built == [RunRecord]
    assert store.get_run("m") == run
    assert built == [RunRecord]
