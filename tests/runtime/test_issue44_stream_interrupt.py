"""``updates`` and ``values`` streams end with an interrupt marker when the run waits."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph, Interrupt
from stargraph.checkpoint import SqliteStore
from stargraph.runtime import RunContext


class Refund(BaseModel):
    amount: float = 0.0
    approved: bool = False
    done: str = ""


def check(state: Refund) -> dict[str, object]:
    return {"amount": state.amount + 1}


def approve(state: Refund, ctx: RunContext) -> dict[str, object]:
    return {"approved": bool(ctx.interrupt({"question": f"refund {state.amount:.2f}?"}))}


def pay(state: Refund) -> dict[str, object]:
    return {"done": "refunded" if state.approved else "refused"}


def refund_graph(*, interrupt_before: bool = False) -> Graph[Refund]:
    return (
        Graph("refund", state=Refund)
        .with_node("check", check)
        .with_node("approve", approve, interrupt_before=interrupt_before)
        .with_node("pay", pay)
        .with_edge(START, "check")
        .with_edge("check", "approve")
        .with_edge("approve", "pay")
        .with_edge("pay", END)
    )


async def collect(stream: Any) -> list[Any]:
    return [item async for item in stream]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_issue44_updates_and_values_streams_end_with_the_interrupt(
    tmp_path: Path, driver: str
) -> None:
    app = refund_graph().compile(store=SqliteStore(tmp_path / "runs.db"))
    question = {"kind": "node", "node": "approve", "step": 2, "index": 0}
    for mode in ("updates", "values"):
        run_id = f"r-{mode}"
        if driver == "sync":
            items = list(app.stream({"amount": 1.0}, mode=mode, run_id=run_id))
        else:
            items = asyncio.run(collect(app.astream({"amount": 1.0}, mode=mode, run_id=run_id)))
        *before, last = items
        assert all("__interrupt__" not in item for item in before if isinstance(item, dict))
        assert list(last) == ["__interrupt__"]
        (waiting,) = last["__interrupt__"]
        assert isinstance(waiting, Interrupt)
        assert waiting.model_dump(include=set(question)) == question
        assert waiting.payload == {"question": "refund 2.00?"}
        assert waiting.run_id == run_id
        # The updates before it are the node that ran; the run then resumes as usual.
        if mode == "updates":
            assert before == [{"check": {"amount": 2.0}}]
        assert app.resume(run_id, response=True).done == "refunded"


def test_issue44_stream_marker_for_interrupt_before_and_on_resume(tmp_path: Path) -> None:
    app = refund_graph(interrupt_before=True).compile(store=SqliteStore(tmp_path / "runs.db"))
    items = list(app.stream({"amount": 1.0}, mode=["updates", "events"], run_id="r1"))
    updates = [item for mode, item in items if mode == "updates"]
    assert updates[0] == {"check": {"amount": 2.0}}
    (waiting,) = updates[-1]["__interrupt__"]
    assert (waiting.kind, waiting.nodes) == ("before", ("approve",))
    # Resumed, the run stops again inside approve: resume_stream ends with that marker.
    resumed = list(app.resume_stream("r1", mode="updates"))
    (again,) = resumed[-1]["__interrupt__"]
    assert (again.kind, again.node) == ("node", "approve")


def test_issue44_a_resumed_run_that_finishes_streams_no_marker(tmp_path: Path) -> None:
    app = refund_graph().compile(store=SqliteStore(tmp_path / "runs.db"))
    assert "__interrupt__" in list(app.stream({"amount": 1.0}, mode="updates", run_id="r1"))[-1]
    finished = list(app.resume_stream("r1", response=False, mode="updates"))
    assert finished == [{"approve": {"approved": False}}, {"pay": {"done": "refused"}}]
