"""What a durable run stores comes back as it was (issue 25 items 3, 10 and 12-13 parts).

NaN and infinities survive every store; ``Any`` channels take only JSON data, refused at the
write with a typed error that fails the run; typed containers round-trip through validation;
a run id the store cannot hold and a 20 MB error message are handled; a damaged step row is
caught by its checksum. Every test runs on the in-memory and the SQLite store.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import CheckpointStore, MemoryStore, SqliteStore
from stargraph.checkpoint._records import MAX_ERROR_CHARS
from stargraph.checkpoint.conformance import same_value
from stargraph.errors import (
    CorruptCheckpointError,
    InvalidInputError,
    InvalidWriteError,
    NodeError,
)
from stargraph.graph import END, START, Graph, Send

WRITE: dict[str, Any] = {}
SEEN: list[Any] = []


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    WRITE.clear()
    SEEN.clear()
    yield
    WRITE.clear()
    SEEN.clear()


# Every test here holds for both stores that need no server (the shared `store` fixture).
pytestmark = pytest.mark.stores("memory", "sqlite")


class Floats(BaseModel):
    x: float = 0.0
    maybe: float | None = 0.0
    loose: Any = None
    many: list[float] = []
    n: int = 0


def write_specials(state: Floats) -> dict[str, Any]:
    return {
        "x": math.nan,
        "maybe": math.inf,
        "loose": {"a": [math.nan, -math.inf, -0.0], "b": math.inf},
        "many": [math.nan, math.inf, -math.inf, -0.0],
    }


def count(state: Floats) -> dict[str, Any]:
    SEEN.append(state.model_dump())
    return {"n": state.n + 1}


def specials_graph() -> Graph[Floats]:
    return (
        Graph("specials", state=Floats)
        .with_node("write", write_specials, interrupt_after=True)
        .with_node("count", count)
        .with_edge(START, "write")
        .with_edge("write", "count")
        .with_edge("count", END)
    )


EXPECTED = {
    "x": math.nan,
    "maybe": math.inf,
    "loose": {"a": [math.nan, -math.inf, -0.0], "b": math.inf},
    "many": [math.nan, math.inf, -math.inf, -0.0],
}


def test_nan_and_infinities_survive_get_state_and_resume(store: CheckpointStore) -> None:
    """Item 3: SQLite stored NaN/inf as null (get_state and resume then raised, and
    ``float | None`` silently became None); now every store gives back the same floats."""
    app = specials_graph().compile(store=store)
    app.invoke({}, run_id="r")
    assert app.get_run("r").status == "interrupted"
    state = app.get_state("r").model_dump()
    assert same_value({k: state[k] for k in EXPECTED}, EXPECTED), state
    final = app.resume("r").model_dump()
    assert final["n"] == 1
    assert same_value({k: final[k] for k in EXPECTED}, EXPECTED), final
    assert same_value({k: SEEN[0][k] for k in EXPECTED}, EXPECTED), "the node saw them too"
    history = app.get_state("r", step=1).model_dump()
    assert same_value({k: history[k] for k in EXPECTED}, EXPECTED)


def test_stores_agree_on_special_floats(tmp_path: Path) -> None:
    """The same run in memory and in SQLite reads back identically."""
    states = []
    for made in (MemoryStore(), SqliteStore(tmp_path / "agree.db")):
        app = specials_graph().compile(store=made)
        app.invoke({}, run_id="r")
        states.append((app.get_state("r").model_dump(), app.resume("r").model_dump()))
        made.close()
    assert same_value(states[0], states[1])


# --------------------------------------------------------------------------- Any channels


class Loose(BaseModel):
    data: Any = None
    table: dict[str, Any] = {}
    name: str = ""
    blob: bytes = b""
    done: bool = False


def write_loose(state: Loose) -> dict[str, Any]:
    return dict(WRITE)


def finish(state: Loose) -> dict[str, Any]:
    return {"done": True}


def loose_graph() -> Graph[Loose]:
    return (
        Graph("loose", state=Loose)
        .with_node("write", write_loose)
        .with_node("finish", finish)
        .with_edge(START, "write")
        .with_edge("write", "finish")
        .with_edge("finish", END)
    )


class Opaque:
    """Not JSON data."""


@pytest.mark.parametrize(
    ("write", "path", "words"),
    [
        ({"data": Opaque()}, "data", ["Opaque", "not JSON data"]),
        ({"data": b"\xff\xfe"}, "data", ["bytes", "base64"]),
        ({"data": {"k": [1, {2, 3}]}}, "data['k'][1]", ["set", "sorted list"]),
        ({"data": (1, 2)}, "data", ["tuple", "list", "tuple[int, int]"]),
        ({"data": {1: "one"}}, "data", ["int key 1", "'1'", "str keys"]),
        ({"table": {"k": (1, 2)}}, "table['k']", ["tuple"]),
        ({"table": {"k": "bad \ud800 text"}}, "table['k']", ["lone surrogate", "UTF-8"]),
        ({"name": "x\udfff"}, "name", ["lone surrogate", "index 1"]),
        ({"blob": b"\x80 not utf-8"}, "blob", ["not UTF-8", "0x80", "base64"]),
    ],
)
def test_any_channels_take_only_json_data(
    store: CheckpointStore, write: dict[str, Any], path: str, words: list[str]
) -> None:
    """Item 10: a non-JSON value (or one JSON would change: a tuple, a set, int keys) is
    refused at the write with a typed error naming node, channel, path, type and fix, and
    the run is marked failed instead of being left running."""
    WRITE.update(write)
    app = loose_graph().compile(store=store)
    with pytest.raises(InvalidWriteError) as info:
        app.invoke({}, run_id="r")
    message = str(info.value)
    assert "node 'write'" in message
    assert f"{path} is " in message
    for word in words:
        assert word in message, (word, message)
    assert (info.value.node, info.value.step) == ("write", 1)
    record = app.get_run("r")
    assert record.status == "failed"
    assert record.error is not None
    assert path in record.error


def _send_payload(state: Loose) -> list[Send]:
    return [Send("finish", {"data": WRITE["sent"]})]


def test_a_send_payload_is_checked_like_a_write(store: CheckpointStore) -> None:
    """Item 10: a ``Send`` payload is stored with the step's tasks, so a tuple sent to an
    ``Any`` channel would reach a resumed task as a list; it is refused like a write."""
    graph = (
        Graph("sends", state=Loose)
        .with_node("write", finish)
        .with_node("finish", finish)
        .with_edge(START, "write")
        .with_conditional_edges("write", _send_payload, ["finish"])
        .with_edge("finish", END)
    )
    app = graph.compile(store=store)
    WRITE["sent"] = (1, 2)
    with pytest.raises(InvalidWriteError, match=r"node 'finish'.*payload for 'data'.*tuple"):
        app.invoke({}, run_id="r")
    assert app.get_run("r").status == "failed"
    WRITE["sent"] = [1, 2]
    assert app.invoke({}, run_id="ok").done


def test_json_data_in_any_channels_round_trips_exactly(store: CheckpointStore) -> None:
    value = {"list": [1, 2.5, None, True, "🦀"], "nested": {"x": [[]], "y": {}}, "nan": math.nan}
    WRITE.update({"data": value, "table": {"k": [1, "2"]}})
    app = loose_graph().compile(store=store)
    final = app.invoke({}, run_id="r")
    assert same_value(final.data, value)
    assert same_value(app.get_state("r").data, value)
    assert app.get_state("r").table == {"k": [1, "2"]}


def test_input_and_update_are_checked_like_writes(store: CheckpointStore) -> None:
    app = loose_graph().compile(store=store)
    with pytest.raises(InvalidInputError, match=r"input of run 'r'.*data\[0\] is a set"):
        app.invoke({"data": [{1, 2}]}, run_id="r")
    WRITE.update({"data": 1})
    app.invoke({}, run_id="ok")
    with pytest.raises(InvalidInputError, match=r"update of run 'f2'.*data is a tuple"):
        app.fork("ok", 1, update={"data": (1, 2)}, new_run_id="f2")


class Typed(BaseModel):
    tags: frozenset[str] = frozenset()
    pair: tuple[int, int] = (0, 0)
    names: dict[int, str] = {}
    nested: list[tuple[str, float]] = []
    done: bool = False


def write_typed(state: Typed) -> dict[str, Any]:
    return {
        "tags": frozenset({"b", "a", "🦀"}),
        "pair": (3, 4),
        "names": {1: "one", 2: "two"},
        "nested": [("x", math.nan), ("y", -0.0)],
    }


def finish_typed(state: Typed) -> dict[str, Any]:
    SEEN.append(state.model_dump())
    return {"done": True}


def test_typed_containers_come_back_equal(store: CheckpointStore) -> None:
    """Typed fields are rebuilt by validation: a tuple, a frozenset and int keys come back
    as themselves (a plain set field is refused at compile time: it has no stable order)."""
    graph = (
        Graph("typed", state=Typed)
        .with_node("write", write_typed, interrupt_after=True)
        .with_node("finish", finish_typed)
        .with_edge(START, "write")
        .with_edge("write", "finish")
        .with_edge("finish", END)
    )
    app = graph.compile(store=store)
    app.invoke({}, run_id="r")
    expected = write_typed(Typed())
    for state in (app.get_state("r"), app.resume("r")):
        assert state.tags == expected["tags"]
        assert type(state.tags) is frozenset
        assert state.pair == (3, 4)
        assert type(state.pair) is tuple
        assert state.names == {1: "one", 2: "two"}
        assert same_value(state.nested, expected["nested"])
    assert SEEN[0]["names"] == {1: "one", 2: "two"}


# --------------------------------------------------------------------------- item 12 parts


class Counter(BaseModel):
    n: int = 0


def bump(state: Counter) -> dict[str, Any]:
    return {"n": state.n + 1}


def explode(state: Counter) -> dict[str, Any]:
    raise RuntimeError("HEAD" + "x" * 20_000_000 + "TAIL")


def counter_graph(fn: Any = bump) -> Graph[Counter]:
    return (
        Graph("counter", state=Counter)
        .with_node("a", fn)
        .with_node("b", bump)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", END)
    )


def test_a_run_id_with_a_lone_surrogate_is_a_typed_error(store: CheckpointStore) -> None:
    app = counter_graph().compile(store=store)
    calls: list[Callable[[], object]] = [
        lambda: app.invoke({}, run_id="r-\ud800"),
        lambda: app.resume("r-\ud800"),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError, match=r"run id 'r-\\ud800'.*lone surrogate"):
            call()
    assert app.list_runs() == []


def test_a_20_mb_error_message_is_stored_cut(store: CheckpointStore) -> None:
    app = counter_graph(explode).compile(store=store)
    with pytest.raises(NodeError):
        app.invoke({}, run_id="r")
    record = app.get_run("r")
    assert record.status == "failed"
    assert record.error is not None
    assert len(record.error) <= MAX_ERROR_CHARS
    assert "HEADxxx" in record.error
    assert record.error.endswith("xxxTAIL")
    assert "characters cut ...]" in record.error


def test_a_damaged_step_row_fails_its_checksum(tmp_path: Path) -> None:
    """Item 13 part: a payload changed after it was written, still valid JSON of the right
    shape, is caught by the step's checksum and named by run and step."""
    path = tmp_path / "sg.db"
    with SqliteStore(path) as store:
        app = counter_graph().compile(store=store)
        app.invoke({}, run_id="r")
        assert app.get_state("r").n == 2
    with sqlite3.connect(path) as conn:
        (payload,) = conn.execute(
            "SELECT payload FROM steps WHERE run_id = 'r' AND step = 1"
        ).fetchone()
        damaged = bytes(payload).replace(b'"n":1', b'"n":7')
        assert damaged != payload
        conn.execute("UPDATE steps SET payload = ? WHERE run_id = 'r' AND step = 1", (damaged,))
    with SqliteStore(path) as store:
        app = counter_graph().compile(store=store)
        with pytest.raises(CorruptCheckpointError, match=r"run 'r' step 1.*checksum") as info:
            app.get_state("r")
        assert (info.value.run_id, info.value.step) == ("r", 1)
        assert app.get_state("r", step=0).n == 0, "the steps before it still read"


def test_a_schema_1_file_is_migrated_and_its_rows_still_read(tmp_path: Path) -> None:
    """Rows written before checksums and leases read back unverified; new rows carry a
    checksum; a run of the old file resumes."""
    from stargraph.checkpoint._sqlite import _MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "v1.db"
    with SqliteStore(tmp_path / "scratch.db") as store:
        app = counter_graph().compile(store=store)
        app.invoke({}, run_id="r")
        graph_hash, code_hash = app.graph_hash, app.code_hash
        step0 = store.get_steps("r", end=0)[0]
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        for sql in _MIGRATIONS[0]:
            conn.execute(sql)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        conn.execute(
            "INSERT INTO runs VALUES ('r', 'counter', ?, ?, 'running', 0, NULL, NULL, "
            "'2024-01-01T00:00:00+00:00', '2024-01-01T00:00:00+00:00', NULL)",
            (graph_hash, code_hash),
        )
        conn.execute(
            "INSERT INTO steps VALUES ('r', 0, 1, ?)",
            (step0.model_dump_json(exclude_defaults=True).encode(),),
        )
    with SqliteStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION == 6
        app = counter_graph().compile(store=store)
        assert app.get_state("r").n == 0
        assert app.resume("r").n == 2
        assert app.get_run("r").status == "done"
    with sqlite3.connect(path) as conn:
        crcs = conn.execute("SELECT step, crc FROM steps ORDER BY step").fetchall()
    assert crcs[0] == (0, None)
    assert all(crc is not None for _, crc in crcs[1:])
