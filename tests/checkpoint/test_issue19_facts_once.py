"""A step stores its rule facts only when they changed: an agent's think and act steps refer
to the observe step that holds them, and every read gives the facts back as the engine made
them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ConfigDict, create_model

from stargraph.checkpoint import CheckpointStore, MemoryStore, SqliteStore, StepRecord
from stargraph.checkpoint._codec import PACKED, decode, unpack
from stargraph.errors import CorruptCheckpointError
from stargraph.llm import ScriptedChatModel
from stargraph.skills.react import react_graph
from stargraph.tools import Arbiter, ToolRegistry
from tests.checkpoint.test_long_runs import ECHO, _script, echo

CALLS = 5
EVERY = 4  # a state snapshot every 4 steps: some think and act steps carry one


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    arbiter = Arbiter(ToolRegistry.build(builtins=[echo]), workspace=str(tmp_path / "ws"))
    yield arbiter
    arbiter.close()


def react(store: CheckpointStore, arbiter: Arbiter) -> list[StepRecord]:
    """A ReAct run of ``CALLS`` tool calls in ``store``; its steps as read back."""
    app = react_graph(tools=[ECHO], max_steps=CALLS + 5).compile(
        store=store,
        services={"model": ScriptedChatModel(_script(CALLS)), "arbiter": arbiter},
        snapshot_every=EVERY,
    )
    assert app.invoke({"task": "observe"}, run_id="r").final_answer == "finished"
    return store.get_steps("r")


def stored_rows(path: Path) -> list[dict[str, Any]]:
    """Every step payload of the file, as JSON (decompressed)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT payload FROM steps ORDER BY step").fetchall()
    out = []
    for (payload,) in rows:
        data = bytes(payload)
        out.append(json.loads(unpack(data) if data[:1] in PACKED else data))
    return out


def test_issue19_react_steps_store_their_facts_once_per_change_and_read_back_whole(
    tmp_path: Path, arbiter: Arbiter
) -> None:
    # The in-memory store keeps each step's facts as the engine gave them.
    made = react(MemoryStore(), arbiter)
    with SqliteStore(tmp_path / "r.db") as store:
        read = react(store, arbiter)
        rows = stored_rows(tmp_path / "r.db")
        # Read back, whatever the range (one starting after the step holding a step's
        # facts included), every step has the facts the engine made.
        facts = [s.facts for s in made]
        assert [s.facts for s in read] == facts
        assert all(s.facts_from is None for s in read)
        for start in range(len(made)):
            assert [s.facts for s in store.get_steps("r", start=start)] == facts[start:]
            (one,) = store.get_steps("r", start=start, end=start)
            assert one.facts == facts[start]
    assert len(rows) == len(made) > 3 * CALLS
    # Stored: in full where they changed (the observe steps, where the termination pack
    # decides) and at state snapshots, else as the step that holds them.
    changed = [k for k in range(1, len(made)) if facts[k] is not None and facts[k] != facts[k - 1]]
    observe = [k for k, s in enumerate(made) if s.writes and s.writes[0].node == "observe"]
    assert changed == [1, *observe]  # step 1: no engine made yet, no facts ({})
    held = [k for k, row in enumerate(rows) if "facts" in row]
    snapshots = [k for k, row in enumerate(rows) if "snapshot" in row and facts[k] is not None]
    assert held == sorted({*changed, *snapshots})
    refer = [k for k, row in enumerate(rows) if "facts_from" in row]
    assert sorted({0, *held, *refer}) == list(range(len(rows)))  # step 0: before any rule
    assert len(refer) >= CALLS
    for k, row in enumerate(rows):
        if "facts_from" in row:
            at = row["facts_from"]
            assert "facts" in rows[at]
            assert facts[at] == facts[k]
            # Never back past the step's snapshot: loading a step reads from its snapshot.
            assert at >= k - k % EVERY


def test_issue19_an_older_stargraph_refuses_a_row_that_refers_to_facts(tmp_path: Path) -> None:
    # What a stargraph from before the reference reads a row with: StepRecord without the
    # field (extra fields forbidden). It must not take the row as a step without facts.
    fields: dict[str, Any] = {
        name: (info.annotation, info)
        for name, info in StepRecord.model_fields.items()
        if name != "facts_from"
    }
    older = create_model("StepRecord", __config__=ConfigDict(frozen=True, extra="forbid"), **fields)
    payload = StepRecord(step=3, facts_from=1).model_dump_json(exclude_defaults=True).encode()
    assert decode(StepRecord, payload, run_id="r", step=3, table="steps").facts_from == 1
    with pytest.raises(CorruptCheckpointError, match="incompatible version"):
        decode(older, payload, run_id="r", step=3, table="steps")
