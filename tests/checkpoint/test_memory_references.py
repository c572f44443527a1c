"""``MemoryStore`` keeps what is immutable by reference (frozen records, the caller's run
record until it is next read) and never what a node or caller can still change: mutating a
returned list, an input or the final state after the run leaves the stored run as it was."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import MemoryStore, RunRecord, StepRecord
from stargraph.checkpoint._lease import new_owner
from stargraph.errors import LeaseLostError
from stargraph.graph import END, START, Graph


class Notes(BaseModel):
    count: int = 0
    items: Annotated[list[str], reducers.append] = []
    extra: Any = None


KEPT: list[list[str]] = []
EXTRA: list[dict[str, Any]] = []


def write_kept(state: Notes) -> dict[str, Any]:
    """Returns a list and a dict it keeps, to mutate after the run."""
    items = [f"item{state.count}"]
    extra = {"nested": [state.count]}
    KEPT.append(items)
    EXTRA.append(extra)
    return {"count": state.count + 1, "items": items, "extra": extra}


def _graph() -> Graph[Notes]:
    return (
        Graph("kept", state=Notes)
        .with_node("a", write_kept)
        .with_node("b", write_kept)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", END)
    )


def _stored(store: MemoryStore, run_id: str) -> list[dict[str, Any]]:
    return [step.model_dump() for step in store.get_steps(run_id)]


def test_issue19_mutations_after_the_run_do_not_reach_the_stored_steps() -> None:
    KEPT.clear()
    EXTRA.clear()
    store = MemoryStore()
    app = _graph().compile(store=store)
    given = ["input"]
    final = app.invoke({"items": given}, run_id="kept-1")
    steps = store.get_steps("kept-1")
    assert [s.step for s in steps] == [0, 1, 2]
    assert steps[0].snapshot == {"count": 0, "items": ["input"], "extra": None}
    assert [w.writes for s in steps[1:] for w in s.writes] == [
        {"count": 1, "items": ["item0"], "extra": {"nested": [0]}},
        {"count": 2, "items": ["item1"], "extra": {"nested": [1]}},
    ]
    before = _stored(store, "kept-1")
    # Everything the caller and the nodes still hold is changed in place.
    given.append("late")
    for items in KEPT:
        items.append("late")
    for extra in EXTRA:
        extra["nested"].append(99)
        extra["new"] = True
    final.items.append("late")
    assert _stored(store, "kept-1") == before
    assert app.get_state("kept-1").items == ["input", "item0", "item1"]


def _record(run_id: str, **fields: Any) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        graph_name="g",
        graph_hash="h",
        code_hash="c",
        created_at="2026-01-01T00:00:00+00:00",
        **fields,
    )


def test_issue19_a_created_run_reads_back_complete_and_the_given_record_is_untouched() -> None:
    store = MemoryStore()
    owner = new_owner(30.0)
    given = _record("r1", owner=owner, error="x" * 20_000)
    store.create_run(given, StepRecord(step=0, snapshot={}))
    # The record handed in is frozen and stays as it was ...
    assert (given.lease_expires, given.updated_at, len(given.error or "")) == (None, "", 20_000)
    # ... while the store shows what it set in it.
    shown = store.get_run("r1")
    assert shown.owner == owner
    assert shown.lease_expires is not None
    assert shown.lease_expires > shown.created_at
    assert shown.updated_at
    assert shown.last_step == 0
    assert len(shown.error or "") < 16_000


def test_issue19_the_final_commit_releases_the_lease_before_the_record_is_read() -> None:
    store = MemoryStore()
    owner = new_owner(30.0)
    store.create_run(_record("r2", owner=owner), StepRecord(step=0, snapshot={}))
    store.commit_step("r2", StepRecord(step=1), status="done", owner=owner.token)
    # Not read since: a later write under the released lease is refused all the same.
    with pytest.raises(LeaseLostError, match="nobody holds it now"):
        store.commit_step("r2", StepRecord(step=2), owner=owner.token)
    with pytest.raises(LeaseLostError):
        store.set_status("r2", "failed", owner=owner.token)
    shown = store.get_run("r2")
    assert (shown.status, shown.last_step, shown.owner, shown.lease_expires) == (
        "done",
        1,
        None,
        None,
    )


class _EveryCommitWhole(MemoryStore):
    """A subclass: the runtime hands it every step as a whole record (``commit_step``)."""


def test_issue19_plain_steps_read_back_as_the_records_a_whole_commit_keeps() -> None:
    plain, whole = MemoryStore(), _EveryCommitWhole()
    for store in (plain, whole):
        _graph().compile(store=store).invoke({"items": ["input"]}, run_id="same")

    def steps(store: MemoryStore) -> list[dict[str, Any]]:
        return [s.model_dump(exclude={"created_ms"}) for s in store.get_steps("same")]

    assert len(steps(plain)) == 3
    assert steps(plain) == steps(whole)
    assert plain.snapshot_step("same", 2) == whole.snapshot_step("same", 2) == 0
    # Read twice, a step is the same record (built once, then kept).
    assert plain.get_steps("same")[1] is plain.get_steps("same")[1]
    shown, expected = plain.get_run("same"), whole.get_run("same")
    assert (shown.status, shown.last_step, shown.owner) == ("done", 2, None)
    assert (expected.status, expected.last_step, expected.owner) == ("done", 2, None)


def test_the_kept_graph_table_forgets_a_store_that_is_gone() -> None:
    """A process that runs each request on a store of its own must not keep the stores
    alive by remembering which of them were given the graph already."""
    import gc
    import weakref

    app = (
        Graph("kept-table", state=_Count)
        .with_node("bump", _bump)
        .with_edge(START, "bump")
        .with_edge("bump", END)
        .compile()
    )
    gone = []
    for i in range(20):
        store = MemoryStore()
        app.with_store(store).invoke({}, run_id=f"r{i}")
        gone.append(weakref.ref(store))
    del store
    gc.collect()
    assert [ref() for ref in gone] == [None] * 20


class _Count(BaseModel):
    n: int = 0


def _bump(state: _Count) -> dict[str, Any]:
    return {"n": state.n + 1}
