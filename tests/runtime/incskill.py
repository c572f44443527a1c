"""The smallest embeddable skill, for tests of subgraph nodes: ``inc`` adds one to ``x``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from stargraph import END, START, Graph
from stargraph.skills import Skill


class Inner(BaseModel):
    """The skill's state."""

    x: int = 0


def bump(state: Inner) -> dict[str, Any]:
    """The skill's one node."""
    return {"x": state.x + 1}


def inc_skill() -> Skill:
    """``inc``: a one-node subgraph over :class:`Inner` (mount it with
    ``SubgraphNode.from_skill(inc_skill(), site="inc")``)."""
    inner = (
        Graph("inner", state=Inner)
        .with_node("bump", bump)
        .with_edge(START, "bump")
        .with_edge("bump", END)
        .to_ir()
    )
    return Skill(
        name="inc",
        version="1.0.0",
        kind="utility",
        description="adds one",
        state_schema=Inner,
        subgraph=inner,
    )
