"""A graph whose plain nodes have an effect outside the record: each appends a line to the
file named by the state's ``ledger``, so a test sees whether a replay ran the body again.

``think`` (``must_stub``) picks the route; ``record`` appends; ``touch`` is fanned out with
one ``Send`` per item and appends; ``audit`` is a subgraph node whose child's ``stamp``
appends. As a graph spec: ``tests.replay.effectgraph:effects``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import reducers
from stargraph.graph import END, START, Graph, Send
from stargraph.nodes import SubgraphNode
from stargraph.skills import Skill


class Ledger(BaseModel):
    """The state: where the effects go, what to fan out over, what the nodes wrote."""

    ledger: str = ""
    items: list[str] = []
    route: str = ""
    log: Annotated[list[str], reducers.append] = []


class Audit(BaseModel):
    """The child's state."""

    ledger: str = ""
    log: Annotated[list[str], reducers.append] = []


def _append(ledger: str, line: str) -> None:
    with Path(ledger).open("a", encoding="utf-8") as out:
        out.write(line + "\n")


def think(state: Ledger) -> dict[str, Any]:
    """Stands for an LLM node: replay always serves its writes."""
    return {"route": "fan" if state.items else "end"}


def record(state: Ledger) -> dict[str, Any]:
    """The side effect a replay of a production run must not repeat unawares."""
    _append(state.ledger, "record")
    return {"log": ["recorded"]}


def fan(state: Ledger) -> list[Send] | str:
    """One ``touch`` task per item, or the end."""
    if state.route != "fan":
        return "audit"
    return [Send("touch", {"item": item, "ledger": state.ledger}) for item in state.items]


class Item(BaseModel):
    """One ``touch`` task's input."""

    item: str
    ledger: str


def touch(task: Item) -> dict[str, Any]:
    """A fanned-out task with an effect."""
    _append(task.ledger, f"touch {task.item}")
    return {"log": [f"touched {task.item}"]}


def stamp(state: Audit) -> dict[str, Any]:
    """The child's node with an effect."""
    _append(state.ledger, "stamp")
    return {"log": ["stamped"]}


def audit_skill() -> Skill:
    """``audit``: a one-node child graph whose node appends to the ledger."""
    inner = (
        Graph("audit", state=Audit)
        .with_node("stamp", stamp)
        .with_edge(START, "stamp")
        .with_edge("stamp", END)
        .to_ir()
    )
    return Skill(
        name="audit",
        version="1.0.0",
        kind="utility",
        description="stamps the ledger",
        state_schema=Audit,
        subgraph=inner,
    )


def effects() -> Graph[Ledger]:
    """think -> record -> (touch per item) -> audit -> END."""
    return (
        Graph("effects", state=Ledger)
        .with_node("think", think, must_stub=True)
        .with_node("record", record)
        .with_node("touch", touch, input=Item)
        .with_node(SubgraphNode.from_skill(audit_skill(), site="audit"))
        .with_edge(START, "think")
        .with_edge("think", "record")
        .with_conditional_edges("record", fan, ["touch", "audit"])
        .with_edge("touch", "audit")
        .with_edge("audit", END)
    )


def lines(ledger: Path) -> list[str]:
    """The ledger's lines, sorted (the ``touch`` tasks run concurrently, in any order);
    none when no node has written it."""
    return sorted(ledger.read_text(encoding="utf-8").splitlines()) if ledger.exists() else []
