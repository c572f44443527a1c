"""The agent of the flagship demo (``examples/demo.py``): an order desk composed of skills.

The graph ``order-desk`` reads::

    START -> intake -> agent -> invoice -> END
                                   \\-> approve -> END   (only when rule desk/big_order fires)

* ``agent`` is the ReAct skill (:func:`stargraph.skills.react.react_skill`) mounted with
  ``SubgraphNode.from_skill``: a think -> act -> observe loop that looks prices up and
  computes with a calculator, stopped only by its ``termination`` rules;
* ``invoice`` is a nested *workflow* skill (two plain nodes) that parses the agent's answer
  and writes the invoice; only its declared outputs come back to the order desk;
* the ``desk`` rule pack routes big orders to ``approve``: the conditional edge after
  ``invoice`` always says END, the rule overrides it (a rule-routed edge in the diagram).

Node functions live in this module (not in ``demo.py``) because the IR names them by import
path (``demo_agent:intake``), and three processes must find them: the worker that gets
killed, the process that resumes, and the offline replay.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, Field, JsonValue

from stargraph import fathom, reducers
from stargraph.graph import END, START, Graph
from stargraph.nodes import SubgraphNode
from stargraph.skills import Skill, SkillKind
from stargraph.skills.react import ReactStep, ToolCallRecord, react_skill
from stargraph.testing import RecordedRequest, Reply
from stargraph.tools import ToolRegistry, tool

PRICES = "demo.prices@1.0.0"
CALC = "demo.calc@1.0.0"
RUN_INPUT = {"request": "  Quote me 3 widgets and 2 gizmos, please.  "}

_CATALOG = {"widget": 4.50, "gizmo": 1.25}

TOOL_BODIES = {"allowed": True}
"""The demo turns this off while it replays: a tool body that runs then fails the replay."""


def _check_allowed() -> None:
    if not TOOL_BODIES["allowed"]:
        raise AssertionError("a tool body ran during an offline replay")


# ----------------------------------------------------------------------------- tools


@tool(id=PRICES, side_effect="none")
def prices(
    item: Annotated[str, Field(description="Catalog item name, e.g. 'widget'.")],
) -> float:
    """Unit price of a catalog item in EUR."""
    _check_allowed()
    if item not in _CATALOG:
        raise ValueError(f"unknown item {item!r}; known: {sorted(_CATALOG)}")
    return _CATALOG[item]


@tool(id=CALC, side_effect="none")
def calc(
    a: Annotated[float, Field(description="Quantity of the first item.")],
    x: Annotated[float, Field(description="Unit price of the first item.")],
    b: Annotated[float, Field(description="Quantity of the second item.")],
    y: Annotated[float, Field(description="Unit price of the second item.")],
) -> float:
    """Total of two order lines: a*x + b*y."""
    _check_allowed()
    return a * x + b * y


def tool_registry() -> ToolRegistry:
    """The two demo tools (the arbiter lets only the skill's allowlist through)."""
    return ToolRegistry.build(builtins=[prices, calc])


# ----------------------------------------------------------------------------- the model


def scripted_model(pace: float = 0.0) -> Callable[[RecordedRequest], Reply]:
    """What a capable model would answer, as a function of the conversation so far.

    Stateless, so a resumed run in a new process (with a new scripted server) gets the same
    answers; call ids are explicit for the same reason. ``pace`` delays every answer (the
    worker that gets killed is paced so the kill lands mid-run).
    """

    def reply(request: RecordedRequest) -> Reply:
        answers = [str(m["content"]) for m in request.messages if m["role"] == "tool"]
        if not answers:
            out = Reply.tool_calls(
                # The short names the model is offered (the last segment of each tool's
                # name): prices, calc.
                [
                    ("call-w", "prices", {"item": "widget"}),
                    ("call-g", "prices", {"item": "gizmo"}),
                ],
                content="I look both prices up.",
            )
        elif len(answers) == 2:
            out = Reply.tool_calls(
                [("call-t", "calc", {"a": 3, "x": 4.5, "b": 2, "y": 1.25})],
                content="3 widgets at 4.50 and 2 gizmos at 1.25.",
            )
        else:
            total = float(answers[-1])  # the tool's payload itself: calc's number
            out = Reply.text(f"The order costs {total:.2f} EUR.")
        return out.delayed(pace) if pace else out

    return reply


# ----------------------------------------------------------------------------- skills


class DeskState(BaseModel):
    """The order desk's state. The ReAct skill's declared outputs (trajectory ... final_output)
    and the invoice skill's (total, invoice) come back into these channels."""

    request: str = ""
    task: str = ""
    trajectory: Annotated[list[ReactStep], reducers.append] = []
    tool_calls: Annotated[list[ToolCallRecord], reducers.append] = []
    done: bool = False
    error_budget: int = 3
    final_answer: str | None = None
    final_output: dict[str, JsonValue] | None = None
    total: Annotated[float, fathom.Fact()] = 0.0
    invoice: str = ""
    approval: str = ""


class InvoiceState(BaseModel):
    """The invoice skill's own state: it reads ``final_answer`` from the desk."""

    final_answer: str | None = None
    total: float = 0.0
    invoice: str = ""


class InvoiceOut(BaseModel):
    """The invoice skill's declared outputs: the only channels it may write back."""

    total: float = 0.0
    invoice: str = ""


def intake(state: DeskState) -> dict[str, Any]:
    """Normalise the customer's request into the agent's task."""
    return {"task": " ".join(state.request.split())}


def parse_total(state: InvoiceState) -> dict[str, Any]:
    """Read the amount out of the agent's answer."""
    found = re.search(r"(\d+(?:\.\d+)?)\s*EUR", state.final_answer or "")
    return {"total": float(found.group(1)) if found else 0.0}


def format_invoice(state: InvoiceState) -> dict[str, Any]:
    """Write the invoice line."""
    return {"invoice": f"INVOICE  order-desk  total {state.total:.2f} EUR"}


def after_invoice(state: DeskState) -> str:
    """The edges alone always end the run here; rule ``desk/big_order`` may say otherwise."""
    return END


def approve(state: DeskState) -> dict[str, Any]:
    """Big orders wait for a manager's approval (reached only through the rule)."""
    return {"approval": f"needs a manager: {state.total:.2f} EUR is over the 15.00 EUR limit"}


def agent_skill() -> Skill:
    """The ReAct loop as a skill: allowlist of two tools, stopped by its termination rules."""
    return react_skill(
        name="order-agent",
        tools=[PRICES, CALC],
        system_prompt=(
            "You price customer orders. Look every item up with the price tool, compute the "
            "total with the calculator, then answer 'The order costs <total> EUR.'"
        ),
        max_steps=6,
        error_budget=2,
    )


def invoice_skill() -> Skill:
    """A nested workflow skill: parse the total, then format the invoice."""
    graph = (
        Graph("invoice", state=InvoiceState)
        .with_node("parse_total", parse_total)
        .with_node("format_invoice", format_invoice)
        .with_edge(START, "parse_total")
        .with_edge("parse_total", "format_invoice")
        .with_edge("format_invoice", END)
    )
    return Skill.from_graph(
        graph,
        name="invoice",
        version="1.0.0",
        kind=SkillKind.WORKFLOW,
        description="Turns the agent's answer into an invoice.",
        state_schema=InvoiceOut,
    )


DESK_RULES = fathom.RulePack.from_spec(
    {
        "id": "desk",
        "version": "1",
        "rules": [
            {
                "name": "big_order",
                "when": [{"node": "invoice"}, {"state.total": {">=": 15}}],
                "then": {"goto": "approve"},
            }
        ],
    }
)
"""Orders of 15 EUR or more go to ``approve`` (a rule, not an edge: auditable, hashed)."""


def desk_graph() -> Graph[DeskState]:
    """The order desk: intake -> agent (ReAct skill) -> invoice (workflow skill) [-> approve]."""
    return (
        Graph("order-desk", state=DeskState)
        .with_node("intake", intake)
        .with_node(SubgraphNode.from_skill(agent_skill(), site="agent"))
        .with_node(SubgraphNode.from_skill(invoice_skill(), site="invoice"))
        .with_node("approve", approve)
        .with_edge(START, "intake")
        .with_edge("intake", "agent")
        .with_edge("agent", "invoice")
        .with_conditional_edges("invoice", after_invoice, {"approve": "approve", END: END})
        .with_edge("approve", END)
        .with_rules(DESK_RULES)
    )
