"""A durable graph for crash tests, run in subprocesses that the tests kill.

``python -c "from tests import crashgraph; crashgraph.main()" DB LEDGER RUN_ID SHAPE`` (from
the repository root) runs (or resumes) one run to its end and prints the final state as JSON.
Every node records its execution in a side-effect ledger (a separate SQLite file) keyed by
``ctx.idempotency_key``, the way a real node would make an external effect idempotent.

``SG_CRASH_AT=<point>:<step>`` makes the process die (``os._exit``) at a named point:
``before_node`` (a node starts), ``after_effect`` (the node's effect is in the ledger but the
step is not checkpointed), ``during_commit`` (inside the checkpoint transaction),
``after_commit`` (right after the step's checkpoint).
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import sys
import time
from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import SqliteStore, StepRecord
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext


class CrashState(BaseModel):
    """Every node logs itself and adds to a total."""

    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


def _crash_point() -> tuple[str, int] | None:
    raw = os.environ.get("SG_CRASH_AT")
    if not raw:
        return None
    point, _, step = raw.partition(":")
    return point, int(step)


def _maybe_crash(point: str, step: int) -> None:
    if _crash_point() == (point, step):
        os._exit(137)


def ledger_path() -> str:
    """Where the ledger lives (set by main from argv)."""
    return os.environ["SG_LEDGER"]


def _ledger_insert(key: str, node: str, step: int) -> None:
    conn = sqlite3.connect(ledger_path(), timeout=30)
    try:
        with conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS ledger (key TEXT PRIMARY KEY, node TEXT, step INT)"
            )
            conn.execute("INSERT OR IGNORE INTO ledger VALUES (?, ?, ?)", (key, node, step))
    finally:
        conn.close()


def work(state: CrashState, ctx: RunContext) -> dict[str, Any]:
    """Sleep a little (so kills land mid-run), record the effect, log the node."""
    _maybe_crash("before_node", ctx.step)
    time.sleep(float(os.environ.get("SG_NODE_SLEEP", "0.004")))
    _ledger_insert(ctx.idempotency_key, ctx.node, ctx.step)
    _maybe_crash("after_effect", ctx.step)
    return {"log": [ctx.node], "total": len(ctx.node)}


class CrashingStore(SqliteStore):
    """A SqliteStore that dies inside or right after the commit of a chosen step."""

    def commit_step(self, run_id: str, step: StepRecord, **kwargs: Any) -> None:
        """Commit, dying at the configured point."""
        if _crash_point() == ("during_commit", step.step):
            # Start the real transaction, write the step row, and die before COMMIT.
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO steps (run_id, step, has_snapshot, payload) VALUES (?, ?, 0, ?)",
                (run_id, step.step, b"{}"),
            )
            os._exit(137)
        super().commit_step(run_id, step, **kwargs)
        _maybe_crash("after_commit", step.step)


def long_graph() -> Graph[CrashState]:
    """30 steps: a 12-node chain, a 5-branch parallel fan-out (blocking nodes on threads)
    joined into one node, then a 16-node chain."""
    graph = Graph("crash30", state=CrashState)
    first = [f"a{i:02d}" for i in range(12)]
    fan = [f"p{i}" for i in range(5)]
    last = [f"z{i:02d}" for i in range(16)]
    for name in first + last + ["join"]:
        graph = graph.with_node(name, work)
    for name in fan:
        graph = graph.with_node(name, work, blocking=True)
    graph = graph.with_edge(START, first[0])
    for a, b in itertools.pairwise(first):
        graph = graph.with_edge(a, b)
    for name in fan:
        graph = graph.with_edge(first[-1], name)
    graph = graph.with_edge(fan, "join").with_edge("join", last[0])
    for a, b in itertools.pairwise(last):
        graph = graph.with_edge(a, b)
    return graph.with_edge(last[-1], END)


def small_graph() -> Graph[CrashState]:
    """4 steps: a -> (b | c) -> d."""
    return (
        Graph("crash4", state=CrashState)
        .with_node("a", work)
        .with_node("b", work)
        .with_node("c", work)
        .with_node("d", work)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("a", "c")
        .with_edge(["b", "c"], "d")
        .with_edge("d", END)
    )


def inner_graph() -> Graph[CrashState]:
    """The child skill of the nested shape: a 10-node chain."""
    graph = Graph("crash-inner", state=CrashState)
    names = [f"c{i}" for i in range(10)]
    for name in names:
        graph = graph.with_node(name, work)
    graph = graph.with_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph = graph.with_edge(a, b)
    return graph.with_edge(names[-1], END)


def nested_graph() -> Graph[CrashState]:
    """5 parent steps, a 10-step child skill (site ``inner``), 5 parent steps."""
    from stargraph.nodes import SubgraphNode
    from stargraph.skills import Skill

    skill = Skill.from_graph(
        inner_graph(),
        name="crash-inner",
        version="1.0.0",
        kind="workflow",
        description="ten steps",
        state_schema=CrashState,
    )
    graph = Graph("crash-nested", state=CrashState).with_node(
        SubgraphNode.from_skill(skill, site="inner")
    )
    before = [f"a{i}" for i in range(5)]
    after = [f"z{i}" for i in range(5)]
    for name in before + after:
        graph = graph.with_node(name, work)
    chain = [*before, "inner", *after]
    graph = graph.with_edge(START, chain[0])
    for a, b in itertools.pairwise(chain):
        graph = graph.with_edge(a, b)
    return graph.with_edge(chain[-1], END)


def keep_looping(state: CrashState) -> str:
    """The edges alone end the loop after one pass; only the goto rule keeps it going."""
    return "stop"


def rules_graph() -> Graph[CrashState]:
    """A loop driven by rules: ``goto work`` after every step, halted by the termination
    pack at step 20. A resumed run must take exactly the decisions of an uninterrupted one."""
    from stargraph import fathom

    goto = fathom.RulePack.from_spec(
        {
            "id": "cycle",
            "version": "1",
            "rules": [{"name": "again", "when": [{"node": "work"}], "then": {"goto": "work"}}],
        }
    )
    return (
        Graph("crash-rules", state=CrashState)
        .with_node("work", work)
        .with_edge(START, "work")
        .with_conditional_edges("work", keep_looping, {"again": "work", "stop": END})
        .with_rules(goto, fathom.default_termination_pack(max_steps=20, error_budget=3))
    )


SHAPES = {
    "long": long_graph,
    "small": small_graph,
    "nested": nested_graph,
    "rules": rules_graph,
}


def main() -> None:
    """Run or resume ``RUN_ID`` to its end; print the final state as JSON."""
    db, ledger, run_id, shape = sys.argv[1:5]
    os.environ["SG_LEDGER"] = ledger
    graph = SHAPES[shape]()
    store = CrashingStore(db)
    app = graph.compile(store=store)
    try:
        try:
            status = app.get_run(run_id).status
        except LookupError:
            status = None
        if status is None:
            final = app.invoke({}, run_id=run_id)
        elif status == "done":
            final = app.get_state(run_id)
        else:
            final = app.resume(run_id)
        print(json.dumps(final.model_dump()))
    finally:
        app.close()
        store.close()
