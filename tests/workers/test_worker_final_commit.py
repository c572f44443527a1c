"""A worker's run ends in its last commit, as any run on a store that can do that, and the
worker's fence still refuses that commit once the worker lost its claim."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, cast

import pytest

from stargraph.checkpoint import MemoryStore, SqliteStore
from stargraph.errors import LeaseLostError
from stargraph.graph import END, START, Graph
from stargraph.workers import Worker, submit
from stargraph.workers._worker import _FencedStore, _Lease
from tests.postgres import workgraph


def add_one(state: workgraph.WorkState) -> dict[str, Any]:
    """Count the step."""
    return {"total": 1}


def tiny() -> Graph[workgraph.WorkState]:
    """Two steps, no side effects (the graph reference the tests submit)."""
    return (
        Graph("work-tiny", state=workgraph.WorkState)
        .with_node("a", add_one)
        .with_node("b", add_one)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", END)
    )


class _LostFlag:
    """What the fence reads of a worker's claim lease: its ``lost`` event."""

    def __init__(self) -> None:
        self.lost = threading.Event()


def test_issue45_fenced_store_forwards_the_features_of_the_store_it_wraps(
    tmp_path: Path,
) -> None:
    lease = cast("_Lease", _LostFlag())
    assert _FencedStore(MemoryStore(), lease).features == {
        "releases_on_final_commit",
        "step_values",
        "node_cache",
    }
    # A worker's run is written as it goes: the fence has no whole-run write to offer.
    with SqliteStore(tmp_path / "f.db") as sqlite:
        assert _FencedStore(sqlite, lease).features == {
            "releases_on_final_commit",
            "refer_to_facts",
            "node_cache",
        }
    assert _FencedStore(cast("Any", object()), lease).features == set()


def test_issue19_a_worker_run_ends_done_and_released(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    submit(db, f"{__name__}:tiny", {}, run_id="tiny-1")
    with Worker(db, lease_s=5) as worker:
        assert worker.run_once() == "done"
        record = worker.store.get_run("tiny-1")
        assert (record.status, record.last_step, record.owner) == ("done", 2, None)
        assert worker.queue.get("tiny-1").status == "done"


LOSING = _LostFlag()


def lose_the_claim(state: workgraph.WorkState) -> dict[str, Any]:
    """Another worker takes the claim over while this step runs."""
    LOSING.lost.set()
    return {"total": 1}


def test_issue19_the_fence_refuses_the_final_commit_after_a_lost_lease() -> None:
    inner = MemoryStore()
    LOSING.lost.clear()
    fenced = _FencedStore(inner, cast("_Lease", LOSING))
    graph = (
        Graph("work-lost", state=workgraph.WorkState)
        .with_node("a", add_one)
        .with_node("b", lose_the_claim)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", END)
    )
    app = graph.compile(store=fenced)
    with pytest.raises(LeaseLostError, match="taken over by another worker"):
        app.invoke({}, run_id="lost-1")
    record = inner.get_run("lost-1")
    # Step 2 (the last) was refused: the run stays at step 1, not done.
    assert (record.status, record.last_step) == ("orphaned", 1)
