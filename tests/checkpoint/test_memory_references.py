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
