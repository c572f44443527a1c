"""Graphs that worker tests queue (``workgraph:small``, ``workgraph:chain``,
``workgraph:suicide``). Every node records its effect in a side-effect ledger keyed by
``ctx.idempotency_key`` (``SG_LEDGER``: a ``postgresql://`` DSN, with ``SG_LEDGER_SCHEMA``,
or a SQLite file), the way a real node makes an external effect idempotent, and appends to
an ``executions`` log without a key (so re-executions are visible)."""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
import time
from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import reducers
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext

_local = threading.local()
_opened: list[Any] = []

# In-process fencing tests: the first execution of step HOLD_STEP waits for RELEASE.
HOLD_ARMED = threading.Event()
REACHED = threading.Event()
RELEASE = threading.Event()
HOLD_STEP = 3


class WorkState(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


def _pg() -> Any:
    conn = getattr(_local, "pg", None)
    if conn is None or conn.closed:
        import psycopg

        conn = _local.pg = psycopg.connect(os.environ["SG_LEDGER"], autocommit=True)
        _opened.append(conn)
    return conn


def close_ledger() -> None:
    """Close the ledger connections this process opened (in-process tests)."""
    while _opened:
        _opened.pop().close()


def setup_ledger(target: str, schema: str = "") -> None:
    """Create the ledger tables (call once before starting workers)."""
    ddl = [
        "CREATE TABLE IF NOT EXISTS {p}ledger (key TEXT PRIMARY KEY, run_id TEXT, node TEXT, "
        "step INT)",
        "CREATE TABLE IF NOT EXISTS {p}executions (key TEXT, node TEXT, step INT, pid INT)",
    ]
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            for sql in ddl:
                conn.execute(sql.format(p=f'"{schema}".'))
    else:
        db = sqlite3.connect(target, timeout=30)
        with db:
            for sql in ddl:
                db.execute(sql.format(p=""))
        db.close()


def ledger_rows(target: str, schema: str = "", table: str = "ledger") -> list[tuple[Any, ...]]:
    """``(run_id, node, step)`` of the ledger, or ``(key, node, step, pid)`` of executions."""
    cols = "run_id, node, step" if table == "ledger" else "key, node, step, pid"
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            return list(conn.execute(f'SELECT {cols} FROM "{schema}".{table}').fetchall())
    db = sqlite3.connect(target, timeout=30)
    try:
        return list(db.execute(f"SELECT {cols} FROM {table}").fetchall())
    finally:
        db.close()


def _record(ctx: RunContext) -> None:
    target = os.environ["SG_LEDGER"]
    key, row = ctx.idempotency_key, (ctx.run_id, ctx.node, ctx.step)
    if target.startswith("postgresql://"):
        p = f'"{os.environ["SG_LEDGER_SCHEMA"]}".'
        conn = _pg()
        conn.execute(
            f"INSERT INTO {p}ledger VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING", (key, *row)
        )
        conn.execute(
            f"INSERT INTO {p}executions VALUES (%s, %s, %s, %s)",
            (key, ctx.node, ctx.step, os.getpid()),
        )
        return
    conn = sqlite3.connect(target, timeout=30)
    try:
        with conn:
            conn.execute("INSERT OR IGNORE INTO ledger VALUES (?, ?, ?, ?)", (key, *row))
            conn.execute(
                "INSERT INTO executions VALUES (?, ?, ?, ?)",
                (key, ctx.node, ctx.step, os.getpid()),
            )
    finally:
        conn.close()


def work(state: WorkState, ctx: RunContext) -> dict[str, Any]:
    """Sleep a little, record the effect, log the node."""
    if ctx.step == HOLD_STEP and HOLD_ARMED.is_set():
        HOLD_ARMED.clear()
        REACHED.set()
        RELEASE.wait(30)
    time.sleep(float(os.environ.get("SG_NODE_SLEEP", "0.001")))
    _record(ctx)
    return {"log": [ctx.node], "total": 1}


def die(state: WorkState, ctx: RunContext) -> dict[str, Any]:
    """Kill the worker process running this node, every time."""
    os._exit(137)


def small() -> Graph[WorkState]:
    """4 steps: a -> (b | c) -> d."""
    return (
        Graph("work-small", state=WorkState)
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


def chain() -> Graph[WorkState]:
    """8 steps of one node each."""
    names = [f"n{i}" for i in range(8)]
    graph = Graph("work-chain", state=WorkState)
    for name in names:
        graph = graph.with_node(name, work)
    graph = graph.with_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph = graph.with_edge(a, b)
    return graph.with_edge(names[-1], END)


def suicide() -> Graph[WorkState]:
    """a -> boom: ``boom`` kills its worker."""
    return (
        Graph("work-suicide", state=WorkState)
        .with_node("a", work)
        .with_node("boom", die)
        .with_edge(START, "a")
        .with_edge("a", "boom")
        .with_edge("boom", END)
    )
