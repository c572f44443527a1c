"""Graphs that the PostgreSQL fault tests queue (``faultgraph:chain``).

Like ``workgraph``, every node records its effect in a side-effect ledger on the server
(``SG_LEDGER``, schema ``SG_LEDGER_SCHEMA``; tables made by ``workgraph.setup_ledger``) keyed by
``ctx.idempotency_key``, and logs each execution without a key. Unlike it, a node outlives
the server going away: it retries its ledger write on a new connection until the server is
back (the way a real node's idempotent effect is retried), so a restart mid-node does not
fail the run.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Any

from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext
from tests.postgres.workgraph import WorkState

_local = threading.local()
RETRY_DEADLINE_S = 60.0


def _record(ctx: RunContext) -> None:
    import psycopg

    schema = f'"{os.environ["SG_LEDGER_SCHEMA"]}".'
    deadline = time.monotonic() + RETRY_DEADLINE_S
    while True:
        conn = getattr(_local, "conn", None)
        try:
            if conn is None or conn.closed:
                conn = _local.conn = psycopg.connect(
                    os.environ["SG_LEDGER"], autocommit=True, connect_timeout=2
                )
            with conn.transaction():
                conn.execute(
                    f"INSERT INTO {schema}ledger VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (ctx.idempotency_key, ctx.run_id, ctx.node, ctx.step),
                )
                conn.execute(
                    f"INSERT INTO {schema}executions VALUES (%s, %s, %s, %s)",
                    (ctx.idempotency_key, ctx.node, ctx.step, os.getpid()),
                )
            return
        except psycopg.OperationalError:
            if conn is not None:
                conn.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def work(state: WorkState, ctx: RunContext) -> dict[str, Any]:
    """Record the effect (retrying while the server is away), log. The tests make their
    faults at a commit they hold on an advisory lock, so the node needs no time of its own."""
    _record(ctx)
    return {"log": [ctx.node], "total": 1}


def chain() -> Graph[WorkState]:
    """6 steps of one node each."""
    names = [f"f{i}" for i in range(6)]
    graph = Graph("fault-chain", state=WorkState)
    for name in names:
        graph = graph.with_node(name, work)
    graph = graph.with_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph = graph.with_edge(a, b)
    return graph.with_edge(names[-1], END)
