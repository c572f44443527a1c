"""Graphs named after the tools the conformance suite's server scenarios call.

``stargraph mcp serve`` serves each graph as the tool of its name, so these make the
scenarios that fit what a served graph can do meaningful (a missing tool would answer every
call with an error result, which some checks take for a pass):

* ``test_simple_text``: a one-step graph; its output comes back as JSON text;
* ``test_error_handling``: a node that fails; the call is an ``isError`` result;
* ``test_tool_with_progress``: three steps, so three progress notifications;
* ``test_elicitation``: a node that interrupts; the server asks the client by elicitation
  and the run goes on with its answer.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from stargraph import END, START, Graph, RunContext


class Said(BaseModel):
    """What a graph says back."""

    text: str = ""


def _simple(state: Said) -> dict[str, Any]:
    return {"text": "This is a simple text response for testing."}


def _fail(state: Said) -> dict[str, Any]:
    raise RuntimeError("This tool intentionally returns an error for testing")


class Steps(BaseModel):
    """Counts its steps."""

    done: int = 0


def _step(state: Steps) -> dict[str, Any]:
    return {"done": state.done + 1}


class Asked(BaseModel):
    """The conformance client's answer to the elicitation."""

    message: str = ""
    answer: Any = None


def _ask(state: Asked, ctx: RunContext) -> dict[str, Any]:
    return {"answer": ctx.interrupt({"message": state.message})}


def _one(name: str, state: type[BaseModel], node: Any) -> Graph[Any]:
    return (
        Graph(name, state=state)
        .with_node("only", node)
        .with_edge(START, "only")
        .with_edge("only", END)
    )


simple_text = _one("test_simple_text", Said, _simple)
error_handling = _one("test_error_handling", Said, _fail)
elicitation = _one("test_elicitation", Asked, _ask)
with_progress = (
    Graph("test_tool_with_progress", state=Steps)
    .with_node("first", _step)
    .with_node("second", _step)
    .with_node("third", _step)
    .with_edge(START, "first")
    .with_edge("first", "second")
    .with_edge("second", "third")
    .with_edge("third", END)
)
