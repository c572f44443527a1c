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
from typing import Any, Final

from stargraph import fathom
from stargraph.checkpoint import SqliteStore
from stargraph.errors import NodeError
from stargraph.graph import Graph
from stargraph.ir import RulePackIR
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.skills.react import ReactState, react_graph
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


# The loop's rules when the fixture was recorded: one pack, its `done` rule reading the
# `done` fact (today's loop ends on the `exit` pack's rules instead).
_RECORDED_PACK: Final = fathom.RulePack.from_spec(
    {
        "id": "termination",
        "version": "react-1",
        "rules": [
            {
                "name": "done",
                "salience": 20,
                "when": [{"state.done": True}, {"node": "observe"}],
                "then": {"halt": "done"},
            },
            {
                "name": "error_budget",
                "salience": 10,
                "when": [{"error_count": {">=": 3}}, {"node": "observe"}],
                "then": {"halt": "error_budget_exhausted"},
            },
            {
                "name": "max_steps",
                "when": [{"state.llm_steps": {">=": CALLS + 2}}, {"node": "observe"}],
                "then": {"halt": "max_steps_exceeded"},
            },
        ],
    }
)
_RECORDED_WRITES: Final = {
    "act": ("error_budget", "error_count", "last_event", "pending", "tool_calls"),
    "observe": ("last_event", "pending", "tool_result", "trajectory"),
}


def recorded_graph() -> Graph[ReactState]:
    """The graph that recorded the fixture (a run resumes and replays only under the graph
    that made it): today's ReAct nodes with the rules and writes the loop had then."""
    ir = react_graph(tools=[ECHO], max_steps=CALLS + 2).to_ir()
    nodes = []
    for recorded in ir.nodes:
        node = recorded
        if node.id in _RECORDED_WRITES:
            update: dict[str, Any] = {"writes": _RECORDED_WRITES[node.id]}
            if node.id == "observe":
                pack = RulePackIR(
                    id=_RECORDED_PACK.id,
                    version=_RECORDED_PACK.version,
                    source=_RECORDED_PACK.source,
                )
                update["rules"] = (pack,)
            node = node.model_copy(update=update)
        nodes.append(node)
    return Graph(ir.model_copy(update={"nodes": tuple(nodes)}), state=ReactState)


def app(store: SqliteStore, workspace: Path, *, broken: bool) -> Any:
    """The compiled ReAct graph (a snapshot every 4 steps), with the scripted model."""
    arbiter = Arbiter(ToolRegistry.build(builtins=[echo]), workspace=str(workspace))
    model = ScriptedChatModel(script(broken=broken))
    graph = recorded_graph()
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
