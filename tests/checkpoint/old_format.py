"""The run behind ``data/v2_react.db``: a durable ReAct run written by the code before model
requests were stored as deltas and snapshots referred back to append-only channels (whole
requests in every step, whole trajectories in every snapshot).

Regenerate only with that older code (``PYTHONPATH=<old checkout>/src python
tests/checkpoint/old_format.py``): the file is the fixture of the migration test.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any
from unittest import mock

from stargraph import fathom
from stargraph.checkpoint import SqliteStore
from stargraph.errors import NodeError
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.skills import react
from stargraph.skills.react import react_graph
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool

ECHO = "oldformat.echo@1.0.0"
ECHO_NAME = llm_name_for(ECHO)
CALLS = 8
BREAK_AT = 5  # the model call that fails in the stored run (its run stops there, failed)
RUN_ID = "old-react"
FIXTURE = Path(__file__).resolve().parent / "data" / "v2_react.db"


@tool(id=ECHO)
def echo(i: int) -> str:
    """Return an observation for call ``i``."""
    return f"observation {i} of the old-format run"


def script(*, broken: bool) -> Any:
    """The model: one tool call per reply until ``CALLS`` were answered, then an answer;
    ``broken`` makes reply ``BREAK_AT`` raise."""

    def answer(request: ChatRequest) -> ChatResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        if broken and done == BREAK_AT:
            raise RuntimeError("the model endpoint is down")
        if done >= CALLS:
            return ChatResponse(message=ChatMessage.assistant("finished"), finish_reason="stop")
        call = ToolCall(id=f"call_{done}", name=ECHO_NAME, arguments=f'{{"i": {done}}}')
        return ChatResponse(
            message=ChatMessage.assistant(tool_calls=[call]), finish_reason="tool_calls"
        )

    return answer


def _react_1(max_steps: int = 10, error_budget: int = 3) -> fathom.RulePack:
    """ReAct's termination pack as the fixture's graph had it (``react-1``, its ``done`` rule a
    halt): the graph hash the stored run names is that graph's."""
    on_observe = {"node": "observe"}
    return fathom.RulePack.from_spec(
        {
            "id": "termination",
            "version": "react-1",
            "rules": [
                {
                    "name": "done",
                    "salience": 20,
                    "when": [{"state.done": True}, on_observe],
                    "then": {"halt": "done"},
                },
                {
                    "name": "error_budget",
                    "salience": 10,
                    "when": [{"error_count": {">=": error_budget}}, on_observe],
                    "then": {"halt": "error_budget_exhausted"},
                },
                {
                    "name": "max_steps",
                    "when": [{"state.llm_steps": {">=": max_steps}}, on_observe],
                    "then": {"halt": "max_steps_exceeded"},
                },
            ],
        }
    )


def app(store: SqliteStore, workspace: Path, *, broken: bool) -> Any:
    """The compiled ReAct graph (a snapshot every 4 steps), with the scripted model."""
    arbiter = Arbiter(ToolRegistry.build(builtins=[echo]), workspace=str(workspace))
    model = ScriptedChatModel(script(broken=broken))
    with mock.patch.object(react, "termination_pack", _react_1):
        graph = react_graph(tools=[ECHO], max_steps=CALLS + 2)
    return graph.compile(
        store=store, services={"model": model, "arbiter": arbiter}, snapshot_every=4
    )


def main() -> None:
    FIXTURE.unlink(missing_ok=True)
    with SqliteStore(FIXTURE) as store:
        with contextlib.suppress(NodeError):
            app(store, FIXTURE.parent / "ws", broken=True).invoke(
                {"task": "observe"}, run_id=RUN_ID
            )
        print(store.get_run(RUN_ID).status, store.get_run(RUN_ID).last_step, file=sys.stderr)
    for leftover in FIXTURE.parent.glob("v2_react.db-*"):
        leftover.unlink()


if __name__ == "__main__":
    main()
