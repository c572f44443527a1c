"""The step records a run keeps in a ``MemoryStore`` share what is the same from step to step
(the scheduled-task records, the record's set of given fields) instead of each holding a
copy: a MemoryStore keeps every step for as long as the run lives, and every object a step
keeps is one more for the garbage collector to walk."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from stargraph.checkpoint import MemoryStore, StepRecord
from stargraph.graph import END, START, Graph


class Count(BaseModel):
    counter: int = 0


def bump(state: Count) -> dict[str, Any]:
    return {"counter": state.counter + 1}


def _chain() -> Graph[Count]:
    graph = Graph("records-chain", state=Count)
    for node in ("a", "b", "c"):
        graph = graph.with_node(node, bump)
    return graph.with_edge(START, "a").with_edge("a", "b").with_edge("b", "c").with_edge("c", END)


def _steps(store: MemoryStore, run_id: str, app: Any = None) -> list[StepRecord]:
    app = app or _chain().compile(store=store)
    assert app.invoke({}, run_id=run_id).counter == 3
    steps: list[StepRecord] = store.get_steps(run_id)
    return steps


def test_runs_share_their_scheduled_task_records() -> None:
    store = MemoryStore()
    app = _chain().compile(store=store)  # the records are the compiled graph's
    first, second = _steps(store, "one", app), _steps(store, "two", app)
    assert [s.next for s in first] == [s.next for s in second]
    for mine, theirs in zip(first, second, strict=True):
        assert mine.next is theirs.next  # the same frozen records, not equal copies


def test_step_records_share_their_set_of_given_fields() -> None:
    steps = _steps(MemoryStore(), "one")
    assert steps[1].model_fields_set is steps[2].model_fields_set
    assert steps[1].model_fields_set == set(StepRecord.model_fields)
    # A copy gets a set of its own: the shared one never changes.
    copied = steps[1].model_copy(update={"facts": {"x": 1}})
    assert copied.facts == {"x": 1}
    assert steps[2].model_fields_set == set(StepRecord.model_fields)
    assert copied.model_fields_set is not steps[2].model_fields_set
