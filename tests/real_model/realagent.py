"""The ReAct agent the real-model tests run: a calculator and a workspace note tool.

Shared by the tests and by ``crashchild.py`` (the process that is killed mid-run), which must
build the very same graph. Every string argument has a ``maxLength``: llama.cpp generates tool
arguments under a grammar made from the schema and with no token limit, so a bound in the
schema is what keeps a small model from writing one argument for minutes.
"""

from __future__ import annotations

import ast
import operator
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import Field

from stargraph.graph import Graph
from stargraph.llm import ChatModel, ChatRequest, ChatResponse, JournaledChatModel, RequestOptions
from stargraph.skills.react import ReactState, react_graph
from stargraph.tools import Arbiter, ToolContext, ToolRegistry, tool

CALC: Final = "real.calc@1.0.0"
NOTE: Final = "real.note@1.0.0"
TOOLS: Final = (CALC, NOTE)
SYSTEM: Final = (
    "You are a careful assistant. Compute with the calc tool and keep notes with the note "
    "tool (files in the workspace), then answer briefly."
)
TASK: Final = "What is 6*7? Compute it with calc, write the result to result.txt, then answer."

_OPERATORS: dict[type[ast.AST], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    raise ValueError(f"unsupported expression element {type(node).__name__}")


@tool(id=CALC)
def calc(
    expression: Annotated[str, Field(description="Arithmetic such as 6*7.", max_length=24)],
) -> float:
    """Evaluate an arithmetic expression."""
    return _evaluate(ast.parse(expression, mode="eval"))


@tool(id=NOTE, side_effect="write", locks=("file:{path}:X",), timeout_s=10)
def note(
    ctx: ToolContext,
    path: Annotated[str, Field(description="A file name such as notes.txt.", max_length=24)],
    text: Annotated[str, Field(description="The line to append.", max_length=40)],
) -> str:
    """Append a line to a text file in the workspace."""
    target = ctx.workspace.resolve(path, tool=ctx.tool)
    with target.open("a", encoding="utf-8") as out:
        out.write(text + "\n")
    return f"appended to {path}"


def registry() -> ToolRegistry:
    """The registry holding the two tools."""
    return ToolRegistry.build(builtins=[calc, note])


def build_graph(*, max_steps: int = 3, forced: str | None = None) -> Graph[ReactState]:
    """The agent. ``forced`` names the tool every reply must call (a named ``tool_choice``),
    which makes the run's shape independent of what the model prefers."""
    choice = None if forced is None else {"type": "function", "function": {"name": forced}}
    return react_graph(
        name="real-react",
        tools=TOOLS,
        system_prompt=SYSTEM,
        max_steps=max_steps,
        error_budget=2,
        temperature=0.0,
        request=RequestOptions(max_tokens=48, tool_choice=choice),
    )


def crash_graph() -> Graph[ReactState]:
    """The graph of the killed-and-resumed run: every reply must write a note."""
    return build_graph(max_steps=3, forced="note")  # the name the model is offered


def arbiter(workspace: Path, **options: Any) -> Arbiter:
    """An arbiter over :func:`registry` confined to ``workspace``."""
    return Arbiter(registry(), workspace=workspace, **options)


class StallingModel:
    """A chat model that answers ``answers`` calls, then signals ``marker`` and stalls
    forever: the run is then certainly in the middle of a step, waiting to be killed."""

    def __init__(self, model: ChatModel, *, answers: int, marker: Path) -> None:
        self.model = model
        self.answers = answers
        self.marker = marker
        self.calls = 0

    def bind_journal(self, journal: Any) -> JournaledChatModel:
        """Record the calls like any chat model (the executor binds it per task)."""
        return JournaledChatModel(self, journal)

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Answer from the wrapped model, or stall once the answers are used up."""
        self.calls += 1
        if self.calls > self.answers:
            self.marker.write_text(f"stalled in model call {self.calls}\n", encoding="utf-8")
            threading.Event().wait()
        return self.model.complete(request)

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """Not used: the run is synchronous."""
        raise NotImplementedError
