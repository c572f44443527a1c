"""What ``invoke``/``resume`` return says when the run stopped at an interrupt, and on what."""

from __future__ import annotations

import asyncio
import copy
import gc
import pickle
import weakref
from pathlib import Path

import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph, Interrupt, fathom, interrupt_of
from stargraph.checkpoint import SqliteStore
from stargraph.runtime import RunContext


class Refund(BaseModel):
    order: str = ""
    amount: float = 0.0
    approved: bool = False
    done: str = ""


def approve(state: Refund, ctx: RunContext) -> dict[str, object]:
    answer = ctx.interrupt({"question": f"refund {state.amount:.2f} on {state.order}?"})
    return {"approved": bool(answer)}


def pay(state: Refund) -> dict[str, object]:
    return {"done": "refunded" if state.approved else "refused"}


def ok(state: Refund) -> dict[str, object]:
    return {"approved": True}


def refund_graph(*, interrupt_before: bool = False, interrupt_after: bool = False) -> Graph[Refund]:
    return (
        Graph("refund", state=Refund)
        .with_node("approve", approve)
        .with_node("pay", pay, interrupt_before=interrupt_before, interrupt_after=interrupt_after)
        .with_edge(START, "approve")
        .with_edge("approve", "pay")
        .with_edge("pay", END)
    )


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "runs.db")


def test_issue21_invoke_of_an_interrupted_run_is_marked_with_what_it_waits_for(
    store: SqliteStore,
) -> None:
    app = refund_graph().compile(store=store)
    state = app.invoke({"order": "A-17", "amount": 12.5}, run_id="r1")
    waiting = interrupt_of(state)
    assert waiting is not None
    assert (waiting.run_id, waiting.kind, waiting.step, waiting.node) == (
        "r1",
        "node",
        1,
        "approve",
    )
    assert waiting.payload == {"question": "refund 12.50 on A-17?"}
    assert waiting.hint() == "resume('r1', response=...)"
    # The record says the same: the marker is the typed form of the stored interrupt.
    assert Interrupt.read(app.get_run("r1").interrupt, run_id="r1") == waiting
    # The marker does not change the state's value or equality.
    assert state == Refund(order="A-17", amount=12.5)
    done = app.resume("r1", response=True)
    assert done.done == "refunded"
    assert interrupt_of(done) is None


def test_issue21_a_finished_run_and_a_copied_state_carry_no_marker(store: SqliteStore) -> None:
    app = refund_graph().compile(store=store)
    state = app.invoke({"order": "A-1", "amount": 1.0}, run_id="r2")
    assert interrupt_of(state) is not None
    assert interrupt_of(state.model_copy()) is None
    assert interrupt_of(Refund(order="A-1", amount=1.0)) is None


def test_issue21_the_marker_goes_with_the_state_object(store: SqliteStore) -> None:
    app = refund_graph().compile(store=store)
    state = app.invoke({"order": "A-2"}, run_id="r3")
    waiting = interrupt_of(state)
    assert waiting is not None
    # Nothing but the state holds it: once the caller lets the state go, it is gone.
    gone = weakref.ref(state)
    del state
    gc.collect()
    assert gone() is None
    assert waiting.run_id == "r3"


def test_issue45_a_marked_state_copies_and_serialises_as_its_fields(store: SqliteStore) -> None:
    app = refund_graph().compile(store=store)
    state = app.invoke({"order": "A-3", "amount": 2.0}, run_id="r4")
    waiting = interrupt_of(state)
    assert waiting is not None
    # Its value is the state's fields and nothing else.
    assert state.model_dump() == Refund(order="A-3", amount=2.0).model_dump()
    assert dict(state) == dict(Refund(order="A-3", amount=2.0))
    assert repr(state) == repr(Refund(order="A-3", amount=2.0))
    assert state.model_dump_json() == Refund(order="A-3", amount=2.0).model_dump_json()
    # A copy, deep or pickled, is another object: it is not where the run stopped.
    for other in (copy.copy(state), copy.deepcopy(state), pickle.loads(pickle.dumps(state))):
        assert other == state
        assert interrupt_of(other) is None
    # Marks of two runs stay apart, on objects alive at once.
    second = app.invoke({"order": "A-4"}, run_id="r5")
    marks = interrupt_of(state), interrupt_of(second)
    assert [m.run_id if m else None for m in marks] == ["r4", "r5"]


def test_issue21_interrupt_before_and_after_are_marked_with_their_nodes(
    store: SqliteStore,
) -> None:
    graph = (
        Graph("pauses", state=Refund)
        .with_node("check", ok)
        .with_node("pay", pay, interrupt_before=True)
        .with_edge(START, "check")
        .with_edge("check", "pay")
        .with_edge("pay", END)
    )
    app = graph.compile(store=store)
    state = app.invoke({"order": "B-1"}, run_id="p1")
    waiting = interrupt_of(state)
    assert waiting is not None
    assert (waiting.kind, waiting.nodes, waiting.step) == ("before", ("pay",), 2)
    assert waiting.hint() == "resume('p1')"
    assert interrupt_of(app.resume("p1")) is None


def test_issue21_ainvoke_and_aresume_mark_the_same_way(store: SqliteStore) -> None:
    app = refund_graph().compile(store=store)

    async def main() -> tuple[Interrupt | None, Interrupt | None, str]:
        state = await app.ainvoke({"order": "C-3", "amount": 3.0}, run_id="a1")
        resumed = await app.aresume("a1", response=False)
        return interrupt_of(state), interrupt_of(resumed), resumed.done

    first, second, done = asyncio.run(main())
    assert first is not None
    assert (first.kind, first.run_id) == ("node", "a1")
    assert second is None
    assert done == "refused"


def test_issue21_a_rule_interrupt_names_its_rule_and_reason(store: SqliteStore) -> None:
    ask = fathom.RulePack.from_spec(
        {
            "id": "review",
            "version": "1",
            "rules": [{"name": "ask", "when": [{"node": "check"}], "then": {"interrupt": "look"}}],
        }
    )

    graph = (
        Graph("reviewed", state=Refund)
        .with_node("check", ok)
        .with_node("pay", pay)
        .with_edge(START, "check")
        .with_edge("check", "pay")
        .with_edge("pay", END)
        .with_rules(ask)
    )
    app = graph.compile(store=store)
    waiting = interrupt_of(app.invoke({"order": "D-4"}, run_id="t1"))
    assert waiting is not None
    assert (waiting.kind, waiting.rule, waiting.reason, waiting.step) == (
        "rule",
        "review/ask",
        "look",
        1,
    )
    assert interrupt_of(app.resume("t1")) is None
