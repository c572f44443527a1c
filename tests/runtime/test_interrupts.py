"""Typed interrupts and rule decisions keep the checkpoint format: ``record()`` gives the
very dicts runs have always stored, and a stored interrupt reads back as the model."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph, RunContext
from stargraph.checkpoint import MemoryStore
from stargraph.runtime._interrupts import Interrupt, RuleDecision, interrupt_id


@pytest.mark.parametrize(
    ("interrupt", "stored"),
    [
        (
            Interrupt(kind="before", nodes=("a", "b"), step=3),
            {"kind": "before", "nodes": ["a", "b"], "step": 3},
        ),
        (
            Interrupt(kind="after", nodes=("a",), step=2),
            {"kind": "after", "nodes": ["a"], "step": 2},
        ),
        (
            Interrupt(kind="node", node="ask", index=1, step=4, seq=2, payload={"q": 1}),
            {"kind": "node", "node": "ask", "index": 1, "step": 4, "seq": 2, "payload": {"q": 1}},
        ),
        (
            Interrupt(kind="rule", rule="pack/r", reason="why", step=5),
            {"kind": "rule", "rule": "pack/r", "reason": "why", "step": 5},
        ),
    ],
)
def test_an_interrupt_records_as_the_checkpoint_format_holds_it(
    interrupt: Interrupt, stored: dict[str, Any]
) -> None:
    assert interrupt.record() == stored
    assert list(interrupt.record()) == list(stored)  # key order too: stored JSON is stable
    assert Interrupt.read(stored) == interrupt


def test_what_is_no_interrupt_reads_as_none() -> None:
    assert Interrupt.read(None) is None
    assert Interrupt.read("waiting") is None
    assert Interrupt.read({"kind": "elsewhere", "step": 1}) is None


def test_a_rule_decision_records_as_stored_with_its_step() -> None:
    decision = RuleDecision(kind="goto", rule="p/r", targets=("b", "a"), reason=None)
    assert decision.record() == {
        "kind": "goto",
        "rule": "p/r",
        "targets": ["b", "a"],
        "reason": None,
    }


class Q(BaseModel):
    answer: str = ""


def ask(state: Q, ctx: RunContext) -> dict[str, Any]:
    return {"answer": str(ctx.interrupt({"question": "name?"}))}


def test_a_parked_run_stores_and_emits_the_recorded_interrupt() -> None:
    store = MemoryStore()
    app = (
        Graph("ask", state=Q)
        .with_node("ask", ask)
        .with_edge(START, "ask")
        .with_edge("ask", END)
        .compile(store=store)
    )
    events = list(app.stream({}, run_id="r"))
    expected = {
        "kind": "node",
        "node": "ask",
        "index": 0,
        "step": 1,
        "seq": 0,
        "payload": {"question": "name?"},
        "id": interrupt_id("r", 1, "ask", 0, 0),
    }
    assert store.get_run("r").interrupt == expected
    assert events[-1].kind == "run_interrupted"
    assert events[-1].payload == expected
    assert app.resume("r", response="Ada").answer == "Ada"
