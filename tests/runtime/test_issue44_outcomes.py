"""Honest outcomes: a run a halt rule stopped ends ``halted`` with the rule and its reason on
the record; ``done`` means the graph reached END or a success rule (``finish``) ended it; a
fork nobody continued is ``pending``; an ``as_node`` update's halt ends the fork."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel

from stargraph import fathom, reducers
from stargraph.checkpoint import CheckpointStore
from stargraph.errors import RunNotResumableError
from stargraph.graph import END, START, Graph
from stargraph.runtime import Event, RunContext, RunFinished

pytestmark = pytest.mark.stores("memory", "sqlite")


class Loop(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    done: Annotated[bool, fathom.Fact()] = False
    error_count: int = 0
    finish_at: int = 0
    blocked: Annotated[bool, fathom.Fact()] = False


def work(state: Loop, ctx: RunContext) -> dict[str, Any]:
    out: dict[str, Any] = {"log": [f"work@{ctx.step}"]}
    if state.finish_at and ctx.step >= state.finish_at:
        out["done"] = True
    return out


def fail_tool(state: Loop) -> dict[str, Any]:
    return {"error_count": state.error_count + 1}


def stop(state: Loop) -> Literal["again", "stop"]:
    return "stop"


AGAIN = fathom.RulePack.from_spec(
    {
        "id": "cycle",
        "version": "1",
        "rules": [{"name": "again", "when": [{"node": "work"}], "then": {"goto": "work"}}],
    }
)
GUARD = fathom.RulePack.from_spec(
    {
        "id": "guard",
        "version": "1",
        "rules": [
            {
                "name": "blocked",
                "when": [{"state.blocked": True}],
                "then": {"halt": "the input is blocked"},
            }
        ],
    }
)


def _loop(*packs: Any, node: Any = work) -> Graph[Loop]:
    return (
        Graph("loop", state=Loop)
        .with_node("work", node)
        .with_edge(START, "work")
        .with_conditional_edges("work", stop, {"again": "work", "stop": END})
        .with_rules(*packs)
    )


def _finished(events: list[Event]) -> RunFinished:
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last


def test_issue44_budget_halt_ends_halted_with_rule_and_reason(store: CheckpointStore) -> None:
    app = _loop(AGAIN, fathom.default_termination_pack(50, 3), node=fail_tool).compile(store=store)
    events = list(app.stream({}, run_id="r"))
    record = app.get_run("r")
    assert (record.status, record.stopped_by, record.stop_reason) == (
        "halted",
        "termination/error_budget",
        "error_budget_exhausted",
    )
    finished = _finished(events)
    assert (finished.status, finished.stopped_by, finished.stop_reason) == (
        "halted",
        "termination/error_budget",
        "error_budget_exhausted",
    )
    assert [r.run_id for r in app.list_runs(status="halted")] == ["r"]
    assert app.list_runs(status="done") == []


def test_issue44_max_steps_and_guard_rules_end_halted(store: CheckpointStore) -> None:
    app = _loop(AGAIN, GUARD, fathom.default_termination_pack(4, 3)).compile(store=store)
    app.invoke({}, run_id="steps")
    app.invoke({"blocked": True}, run_id="guard")
    steps, guard = app.get_run("steps"), app.get_run("guard")
    assert (steps.status, steps.stopped_by, steps.stop_reason) == (
        "halted",
        "termination/max_steps",
        "max_steps_exceeded",
    )
    assert (guard.status, guard.stopped_by, guard.stop_reason) == (
        "halted",
        "guard/blocked",
        "the input is blocked",
    )


def test_issue44_done_rule_finishes_the_run_done(store: CheckpointStore) -> None:
    app = _loop(AGAIN, fathom.default_termination_pack(50, 3)).compile(store=store)
    events = list(app.stream({"finish_at": 3}, run_id="r"))
    record = app.get_run("r")
    assert (record.status, record.stopped_by, record.stop_reason) == (
        "done",
        "termination/done",
        "done",
    )
    assert _finished(events).status == "done"
    assert app.history("r")[-1].decision == {
        "kind": "finish",
        "rule": "termination/done",
        "targets": [],
        "reason": "done",
    }


def test_issue44_reaching_end_is_done_without_a_rule(store: CheckpointStore) -> None:
    app = _loop(fathom.default_termination_pack(50, 3)).compile(store=store)
    app.invoke({}, run_id="r")
    record = app.get_run("r")
    assert (record.status, record.stopped_by, record.stop_reason) == ("done", None, None)


def test_issue44_async_stream_ends_halted(store: CheckpointStore) -> None:
    app = _loop(AGAIN, fathom.default_termination_pack(3, 3)).compile(store=store)

    async def events() -> list[Event]:
        return [event async for event in app.astream({}, run_id="r")]

    finished = _finished(asyncio.run(events()))
    assert (finished.status, finished.stopped_by) == ("halted", "termination/max_steps")
    assert app.get_run("r").status == "halted"


def test_issue44_halted_run_is_terminal_on_resume(store: CheckpointStore) -> None:
    app = _loop(AGAIN, fathom.default_termination_pack(3, 3)).compile(store=store)
    app.invoke({}, run_id="r")
    with pytest.raises(RunNotResumableError, match="halted by rule termination/max_steps"):
        app.resume("r")


def test_issue44_thread_turn_after_a_halted_turn(store: CheckpointStore) -> None:
    app = _loop(GUARD, fathom.default_termination_pack(50, 3)).compile(store=store)
    app.invoke({"blocked": True}, thread_id="t", run_id="t1")
    assert app.get_run("t1").status == "halted"
    final = app.invoke({"blocked": False}, thread_id="t", run_id="t2")
    assert app.get_run("t2").status == "done"
    assert final.log == ["work@1", "work@1"]


def test_issue44_fork_is_pending_until_resumed(store: CheckpointStore) -> None:
    app = _loop(fathom.default_termination_pack(50, 3)).compile(store=store)
    app.invoke({}, run_id="r")
    fork_id = app.fork("r", 0, new_run_id="f")
    assert app.get_run(fork_id).status == "pending"
    assert [r.run_id for r in app.list_runs(status="pending")] == ["f"]
    assert app.list_runs(status="running") == []
    app.resume(fork_id)
    assert app.get_run(fork_id).status == "done"


def test_issue44_fork_with_update_is_pending(store: CheckpointStore) -> None:
    app = _loop(fathom.default_termination_pack(50, 3)).compile(store=store)
    app.invoke({}, run_id="r")
    app.fork("r", 0, update={"finish_at": 9}, new_run_id="f")
    assert app.get_run("f").status == "pending"


def test_issue44_as_node_update_halt_ends_the_fork_halted(store: CheckpointStore) -> None:
    app = _loop(GUARD, fathom.default_termination_pack(50, 3)).compile(store=store)
    app.invoke({}, run_id="r")
    fork_id = app.fork("r", 1, update={"blocked": True}, as_node="work", new_run_id="f")
    record = app.get_run(fork_id)
    assert (record.status, record.stopped_by, record.stop_reason) == (
        "halted",
        "guard/blocked",
        "the input is blocked",
    )
    assert app.fork_next("r", 1, update={"blocked": True}, as_node="work") == ()


def test_issue44_as_node_resume_halt_ends_halted(store: CheckpointStore) -> None:
    app = (
        Graph("loop", state=Loop)
        .with_node("work", work)
        .with_node("wait", work, interrupt_before=True)
        .with_edge(START, "work")
        .with_edge("work", "wait")
        .with_edge("wait", END)
        .with_rules(GUARD, fathom.default_termination_pack(50, 3))
        .compile(store=store)
    )
    app.invoke({}, run_id="r")
    assert app.get_run("r").status == "interrupted"
    app.resume("r", update={"blocked": True}, as_node="work")
    record = app.get_run("r")
    assert (record.status, record.stopped_by, record.stop_reason) == (
        "halted",
        "guard/blocked",
        "the input is blocked",
    )


budget = _loop(AGAIN, fathom.default_termination_pack(50, 3), node=fail_tool)
"""A loop whose every step fails a tool: its error budget halts it (the CLI tests run it)."""

success = _loop(AGAIN, fathom.default_termination_pack(50, 3))
"""A loop its ``done`` rule finishes once ``finish_at`` is reached."""


def test_issue44_as_node_is_recorded_on_the_update_step(store: CheckpointStore) -> None:
    app = _loop(fathom.default_termination_pack(50, 3)).compile(store=store)
    app.invoke({}, run_id="r")
    routed = app.fork("r", 1, update={"finish_at": 5}, as_node="work", new_run_id="f")
    kept = app.fork("r", 1, update={"finish_at": 5}, new_run_id="k")
    assert [s.as_node for s in app.history(routed)] == [None, None, "work"]
    assert [s.as_node for s in app.history(kept)] == [None, None, None]
