"""Rule packs mounted on graphs and nodes, deciding at step boundaries (invariant 7)."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel

from stargraph import fathom, reducers
from stargraph.checkpoint import SqliteStore
from stargraph.errors import CompileError, NodeError
from stargraph.graph import END, START, Graph
from stargraph.runtime import Event, RunContext, RunFinished

TRIPS: list[str] = []


class Loop(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    done: Annotated[bool, fathom.Fact()] = False
    error_count: int = 0
    finish_at: int = 0
    boom_at: int = 0


def work(state: Loop, ctx: RunContext) -> dict[str, Any]:
    TRIPS.append(f"{ctx.node}@{ctx.step}")
    if state.boom_at and ctx.step == state.boom_at and ctx.step not in state_seen_booms:
        state_seen_booms.add(ctx.step)
        raise RuntimeError("crash")
    out: dict[str, Any] = {"log": [f"{ctx.node}@{ctx.step}"]}
    if state.finish_at and ctx.step >= state.finish_at:
        out["done"] = True
    return out


state_seen_booms: set[int] = set()


def fail_tool(state: Loop, ctx: RunContext) -> dict[str, Any]:
    return {"error_count": state.error_count + 1, "log": ["tool failed"]}


def never_loop(state: Loop) -> Literal["again", "stop"]:
    # The edges alone would end the run after one step; only a rule can keep it going.
    return "stop"


def _looping(*packs: Any, node: Any = work) -> Graph[Loop]:
    return (
        Graph("loop", state=Loop)
        .with_node("work", node)
        .with_edge(START, "work")
        .with_conditional_edges("work", never_loop, {"again": "work", "stop": END})
        .with_rules(*packs)
    )


GOTO_WORK = fathom.RulePack.from_spec(
    {
        "id": "cycle",
        "version": "1",
        "rules": [{"name": "again", "when": [{"node": "work"}], "then": {"goto": "work"}}],
    }
)


@pytest.fixture(autouse=True)
def _reset() -> None:
    TRIPS.clear()
    state_seen_booms.clear()


def _finished(events: list[Event]) -> RunFinished:
    """The stream's last event, which must say the run finished."""
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last


def test_goto_cycle_stops_at_exactly_max_steps() -> None:
    app = _looping(GOTO_WORK, fathom.default_termination_pack(max_steps=7, error_budget=3))
    events = list(app.compile().stream({}, run_id="r"))
    assert [f"work@{i}" for i in range(1, 8)] == TRIPS
    finished = _finished(events)
    assert finished.kind == "run_finished"
    assert finished.stopped_by == "termination/max_steps"
    decisions = [(e.step, e.decision, e.rule) for e in events if e.kind == "rule_decided"]
    assert decisions[:2] == [(1, "goto", "cycle/again"), (2, "goto", "cycle/again")]
    assert decisions[-1] == (7, "halt", "termination/max_steps")


def test_without_the_goto_rule_the_edges_decide() -> None:
    app = _looping(fathom.default_termination_pack(max_steps=7, error_budget=3)).compile()
    assert app.invoke({}).log == ["work@1"]


def test_done_flag_stops_at_the_next_step_boundary() -> None:
    app = _looping(GOTO_WORK, fathom.default_termination_pack(max_steps=50, error_budget=3))
    events = list(app.compile().stream({"finish_at": 4}))
    assert TRIPS == ["work@1", "work@2", "work@3", "work@4"]
    assert _finished(events).stopped_by == "termination/done"


def test_error_budget_exhausted() -> None:
    app = _looping(
        GOTO_WORK, fathom.default_termination_pack(max_steps=50, error_budget=3), node=fail_tool
    )
    events = list(app.compile().stream({}))
    assert _finished(events).state["error_count"] == 3
    assert _finished(events).stopped_by == "termination/error_budget"


def test_stopping_rule_is_recorded_in_the_run(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "r.db")
    app = _looping(GOTO_WORK, fathom.default_termination_pack(5, 3)).compile(store=store)
    app.invoke({}, run_id="r")
    record = app.get_run("r")
    assert (record.status, record.stopped_by, record.last_step) == (
        "halted",
        "termination/max_steps",
        5,
    )
    assert app.history("r")[3].facts is not None  # rule facts saved with each step
    assert app.history("r")[5].decision == {
        "kind": "halt",
        "rule": "termination/max_steps",
        "targets": [],
        "reason": "max_steps_exceeded",
    }
    store.close()


def test_resume_after_a_crash_takes_the_same_decisions(tmp_path: Path) -> None:
    packs = (GOTO_WORK, fathom.default_termination_pack(max_steps=9, error_budget=3))
    reference = _looping(*packs).compile().invoke({})
    TRIPS.clear()
    store = SqliteStore(tmp_path / "r.db")
    app = _looping(*packs).compile(store=store)
    with pytest.raises(NodeError):
        app.invoke({"boom_at": 5}, run_id="r")
    assert app.get_run("r").last_step == 4
    resumed = app.resume("r")
    assert resumed.log == reference.log
    assert app.get_run("r").stopped_by == "termination/max_steps"
    assert TRIPS.count("work@5") == 2  # the crashed step re-ran, the others did not
    store.close()


# Counts node b's steps and halts at b's next step once it counted three: the count lives in
# the engine's facts (a global), so a resumed run decides the same only if its engine gets
# them back.
COUNT_B = fathom.RulePack.from_clp(
    "count-b",
    "1",
    "(defglobal ?*seen* = 0)\n"
    '(defrule count (sg-step (node "b")) => (bind ?*seen* (+ ?*seen* 1)))\n'
    "(defrule enough (sg-step) (test (>= ?*seen* 3)) =>\n"
    '  (assert (sg-decision (kind halt) (reason "b ran three times") (rule enough))))\n',
)


def always_again(state: Loop) -> Literal["again", "stop"]:
    # Only a rule ends the loop.
    return "again"


def _alternating() -> Graph[Loop]:
    """``a`` and ``b`` in turn for good, but for ``COUNT_B`` mounted on ``b``: the rule facts
    change at b's steps only."""
    return (
        Graph("ab-loop", state=Loop)
        .with_node("a", work)
        .with_node("b", work, rules=[COUNT_B])
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_conditional_edges("b", always_again, {"again": "a", "stop": END})
    )


def _stored_row(path: Path, run_id: str, step: int) -> dict[str, Any]:
    """The step's payload as the file holds it (JSON, maybe zlib-compressed)."""
    with sqlite3.connect(path) as conn:
        (payload,) = conn.execute(
            "SELECT payload FROM steps WHERE run_id = ? AND step = ?", (run_id, step)
        ).fetchone()
    data = bytes(payload)
    loaded = json.loads(zlib.decompress(data) if data[:1] in (b"x", b"H") else data)
    assert isinstance(loaded, dict)
    return loaded


def test_issue19_resume_from_a_step_whose_facts_are_a_reference_decides_the_same(
    tmp_path: Path,
) -> None:
    reference = _alternating().compile(max_steps=40).invoke({})
    assert reference.log == [f"{'ab'[i % 2]}@{i + 1}" for i in range(8)]
    TRIPS.clear()
    store = SqliteStore(tmp_path / "r.db")
    app = _alternating().compile(store=store, max_steps=40)
    with pytest.raises(NodeError):
        app.invoke({"boom_at": 6}, run_id="r")
    assert app.get_run("r").last_step == 5
    # Step 5 (node a) left the facts of step 4 (node b) as they were: its row names step 4,
    # which a read of step 5 alone (what a resume reads) must go back to.
    last = _stored_row(tmp_path / "r.db", "r", 5)
    assert (last.get("facts"), last.get("facts_from")) == (None, 4)
    assert _stored_row(tmp_path / "r.db", "r", 4)["facts"]["node:b"]["globals"] == {"seen": 2}
    resumed = app.resume("r")
    assert resumed.log == reference.log
    assert app.get_run("r").stopped_by == "count-b/enough"
    store.close()


def test_node_mounted_pack_only_decides_after_its_node() -> None:
    halt_after_b = fathom.RulePack.from_spec(
        {
            "id": "stop-b",
            "version": "1",
            "rules": [{"name": "stop", "when": [{"step": {">=": 1}}], "then": {"halt": "b ran"}}],
        }
    )
    graph = (
        Graph("ab", state=Loop)
        .with_node("a", work)
        .with_node("b", work, rules=[halt_after_b])
        .with_node("c", work)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", "c")
        .with_edge("c", END)
    )
    events = list(graph.compile().stream({}))
    assert TRIPS == ["a@1", "b@2"]
    assert _finished(events).stopped_by == "stop-b/stop"


def test_interrupt_decision_parks_the_run(tmp_path: Path) -> None:
    ask = fathom.RulePack.from_spec(
        {
            "id": "review",
            "version": "1",
            "rules": [
                {"name": "ask", "when": [{"step": 2}], "then": {"interrupt": "check step 2"}}
            ],
        }
    )
    graph = (
        Graph("abc", state=Loop)
        .with_node("a", work)
        .with_node("b", work)
        .with_node("c", work)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", "c")
        .with_edge("c", END)
        .with_rules(ask)
    )
    store = SqliteStore(tmp_path / "r.db")
    app = graph.compile(store=store)
    assert app.invoke({}, run_id="r").log == ["a@1", "b@2"]
    record = app.get_run("r")
    assert record.status == "interrupted"
    assert record.interrupt == {
        "kind": "rule",
        "rule": "review/ask",
        "reason": "check step 2",
        "step": 2,
    }
    # Interrupt outranks goto and continue: the run parks with what the edges scheduled.
    assert app.resume("r").log == ["a@1", "b@2", "c@3"]
    assert app.get_run("r").status == "done"
    store.close()


def test_malformed_packs_fail_compile_and_nothing_runs() -> None:
    to_nowhere = fathom.RulePack.from_spec(
        {
            "id": "bad",
            "version": "1",
            "rules": [{"name": "jump", "when": [{"node": "work"}], "then": {"goto": "ghost"}}],
        }
    )
    broken = fathom.RulePack.from_clp("broken", "1", "(defrule oops (sg-step (step ?s)) =>")
    with pytest.raises(CompileError) as info:
        _looping(to_nowhere, broken).compile()
    text = str(info.value)
    assert "/rule_packs/0" in text
    assert "'bad'" in text
    assert "ghost" in text
    assert "/rule_packs/1" in text
    assert "broken" in text
    assert TRIPS == []


def test_rule_text_is_part_of_the_hash() -> None:
    one = _looping(fathom.default_termination_pack(5, 3)).to_ir().graph_hash
    two = _looping(fathom.default_termination_pack(6, 3)).to_ir().graph_hash
    assert one != two


class Verdict(BaseModel):
    done: str = ""  # the user's own field, not the termination flag (not marked Fact())


def write_verdict(state: Verdict) -> dict[str, Any]:
    return {"done": "shipped"}


def test_an_unmarked_done_field_that_is_not_a_bool_is_not_read_by_the_rules() -> None:
    # It failed every rule decision with "fact 'done' = '' is not a bool as declared",
    # though rules see only fields marked Fact().
    watch = fathom.RulePack.from_spec(
        {
            "id": "watch",
            "version": "1",
            "rules": [{"name": "n", "when": [{"step": 9}], "then": {"halt": "never here"}}],
        }
    )
    graph = (
        Graph("verdict", state=Verdict)
        .with_node("write", write_verdict)
        .with_edge(START, "write")
        .with_edge("write", END)
        .with_rules(watch)
    )
    assert graph.compile().invoke({}).done == "shipped"
