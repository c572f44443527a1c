"""``PostgresStore.write_run``: a whole run (graph included) in one transaction, and the
durable runtime's ``durability="exit"`` writing through it as it does on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import (
    JournalEntry,
    PendingWrite,
    PostgresStore,
    RunRecord,
    SqliteStore,
    StepRecord,
    WriteRecord,
)
from stargraph.errors import CheckpointError
from stargraph.graph import END, START, Graph


def _record(run_id: str, status: Any, **fields: Any) -> RunRecord:
    return RunRecord(
        run_id=run_id, graph_name="g", graph_hash="h", code_hash="c", status=status, **fields
    )


STEPS = [
    StepRecord(step=0, snapshot={"n": 0}),
    StepRecord(step=1, writes=(WriteRecord(node="a", writes={"n": 1}),)),
]


def test_issue19_pg_write_run_writes_a_whole_run(pg_dsn: str, pg_schema: str) -> None:
    """The run reads back as written: its final record, every step, the pending writes and
    journal of its unfinished step, and the graph's IR."""
    pending = PendingWrite(step=2, node="a", index=0, writes={"n": 2})
    entry = JournalEntry(step=2, node="a", index=0, seq=0, kind="uuid", key="", value="u-1")
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        store.write_run(
            _record("w", "failed", last_step=1, error="boom"),
            STEPS,
            pending=[pending],
            journal=[entry],
            graph=("gh", b'{"ir": 1}'),
        )
        run = store.get_run("w")
        assert (run.status, run.last_step, run.error, run.owner) == ("failed", 1, "boom", None)
        assert store.get_steps("w") == STEPS
        assert store.get_pending("w", 2) == [pending]
        assert store.get_journal("w", 2) == [entry]
        assert store.get_graph("gh") == b'{"ir": 1}'


def test_issue19_pg_write_run_is_all_or_nothing(pg_dsn: str, pg_schema: str) -> None:
    """A run whose id is taken, or whose steps do not follow each other, writes nothing -
    not even its graph, which the same transaction holds."""
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        store.write_run(_record("w", "done", last_step=1), STEPS)
        with pytest.raises(CheckpointError, match="already exists"):
            store.write_run(_record("w", "failed"), STEPS, graph=("taken", b"{}"))
        assert store.get_run("w").status == "done"
        assert store.get_graph("taken") is None, "the graph was rolled back with the run"
        with pytest.raises(CheckpointError, match="step 2 cannot follow"):
            store.write_run(
                _record("u", "done"),
                [STEPS[0], STEPS[0].model_copy(update={"step": 2})],
                graph=("gap", b"{}"),
            )
        assert [r.run_id for r in store.list_runs()] == ["w"]
        assert store.get_graph("gap") is None
        # The store stays usable: the failed transactions left no connection behind in them.
        store.write_run(_record("v", "done", last_step=1), STEPS)
        assert store.get_run("v").status == "done"


class CountingStore(PostgresStore):
    """Counts whole-run writes and the connections taken outside them."""

    def __init__(self, dsn: str, *, schema: str) -> None:
        self.calls: dict[str, int] = {}
        super().__init__(dsn, schema=schema)

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        if getattr(self._local, "batch", None) is None:
            self.calls["connections"] = self.calls.get("connections", 0) + 1
        with super()._conn() as conn:
            yield conn

    def write_run(self, *args: Any, **kwargs: Any) -> None:
        self.calls["write_run"] = self.calls.get("write_run", 0) + 1
        super().write_run(*args, **kwargs)


class Log(BaseModel):
    limit: int = 0
    items: Annotated[list[int], reducers.append] = []


def grow(state: Log) -> dict[str, Any]:
    return {"items": [len(state.items)]}


def again(state: Log) -> str:
    return "grow" if len(state.items) < state.limit else END


def test_issue19_pg_durability_exit_writes_the_run_once(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    """A run kept in memory reaches PostgreSQL in one ``write_run`` (one connection, one
    transaction) when it stops, and reads back like a run committed step by step."""
    graph = (
        Graph("growing-loop", state=Log)
        .with_node("grow", grow)
        .with_edge(START, "grow")
        .with_conditional_edges("grow", again, ["grow", END])
    )
    with (
        CountingStore(pg_dsn, schema=pg_schema) as store,
        SqliteStore(tmp_path / "sync.db") as ref,
    ):
        store.calls = {}
        exit_app = graph.compile(store=store, durability="exit", max_steps=100, snapshot_every=7)
        final = exit_app.invoke({"limit": 30}, run_id="x")
        assert store.calls == {"write_run": 1, "connections": 1}
        sync_app = graph.compile(store=ref, max_steps=100, snapshot_every=7)
        assert sync_app.invoke({"limit": 30}, run_id="x") == final
        run = store.get_run("x")
        assert (run.status, run.owner, run.last_step) == ("done", None, ref.get_run("x").last_step)
        assert store.get_graph(run.graph_hash) is not None, "the graph came with the run"
        assert [s.model_copy(update={"created_ms": 0}) for s in store.get_steps("x")] == [
            s.model_copy(update={"created_ms": 0}) for s in ref.get_steps("x")
        ]
        for step in (0, 13, 30):
            assert exit_app.get_state("x", step) == sync_app.get_state("x", step)
