"""A graph whose one node calls two tools of server-everything, for the SIGKILL test.

Run as a script it is the agent process the test kills: ``python mcp_durable_graph.py DB
LOG`` starts the run ``r1`` on the SQLite file ``DB``, with the server's input teed to ``LOG``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from stargraph import END, START, Graph, RunContext
from stargraph.checkpoint import SqliteStore
from stargraph.tools import Arbiter, McpListing, McpServer, ToolCall, ToolRegistry


class Job(BaseModel):
    """The node writes both tools' summaries."""

    total: str = ""
    long: str = ""


def work(state: Job, ctx: RunContext) -> dict[str, Any]:
    """A quick sum, then a long operation: the process is killed during the second."""
    arbiter = ctx.services["arbiter"]
    total = arbiter.dispatch(ToolCall(tool="mcp.everything.get-sum", args={"a": 2, "b": 3}))
    long = arbiter.dispatch(
        ToolCall(
            tool="mcp.everything.trigger-long-running-operation",
            args={"duration": 2, "steps": 2},
        )
    )
    return {"total": total.summary, "long": long.summary}


def graph() -> Graph[Job]:
    """START -> work -> END."""
    return (
        Graph("mcp-durable", state=Job)
        .with_node("work", work)
        .with_edge(START, "work")
        .with_edge("work", END)
    )


def server(command: list[str], listing: McpListing | None = None) -> McpServer:
    """server-everything by ``command``."""
    return McpServer(command=command, name="everything", listing=listing)


def teed(log: Path, everything: str) -> list[str]:
    """``everything`` with what the client sends it appended to ``log``."""
    return ["sh", "-c", f'tee -a "{log}" | exec "{everything}"']


def main() -> None:
    db, log, everything = sys.argv[1:4]
    arbiter = Arbiter(
        ToolRegistry.build(mcp=[server(teed(Path(log), everything))]), workspace=Path(db).parent
    )
    with SqliteStore(db) as store, arbiter:
        graph().compile(store=store, services={"arbiter": arbiter}).invoke({}, run_id="r1")


if __name__ == "__main__":
    main()
