"""The process ``test_sqlite_journal_files`` kills once its node's effect is journaled:
``python -m tests.checkpoint.callschild DB LEDGER``.

The node charges a ledger through ``ctx.once`` (journaled), then stops itself with SIGSTOP,
where the test SIGKILLs it: the step never commits, so only the run's journal file holds the
charge.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.graph import END, START, Graph
from stargraph.runtime import CompiledGraph, RunContext

RUN_ID = "charged"


class Bill(BaseModel):
    """The state: the charge's receipt."""

    receipt: str = ""


def _charge(ledger: Path) -> str:
    """The effect that must happen once: a line in the ledger."""
    with ledger.open("a") as file:
        file.write("charged\n")
    return f"receipt-{len(ledger.read_text().splitlines())}"


def charge(state: Bill, ctx: RunContext) -> dict[str, Any]:
    """Charge once, then (in the child) stop before the step can commit."""
    receipt = ctx.once("charge", lambda: _charge(Path(os.environ["SG_LEDGER"])))
    if os.environ.get("SG_STOP_AFTER_CHARGE"):
        os.kill(os.getpid(), signal.SIGSTOP)
    return {"receipt": receipt}


def app(store: SqliteStore) -> CompiledGraph[Bill]:
    """The one-node graph, compiled on ``store``."""
    graph = Graph("bill", state=Bill).with_node("charge", charge)
    return graph.with_edge(START, "charge").with_edge("charge", END).compile(store=store)


def main() -> None:
    db, ledger = sys.argv[1:3]
    os.environ["SG_LEDGER"] = ledger
    os.environ["SG_STOP_AFTER_CHARGE"] = "1"
    with SqliteStore(db) as store:
        app(store).invoke({}, run_id=RUN_ID)


if __name__ == "__main__":
    main()
