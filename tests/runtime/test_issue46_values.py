"""The ``values`` stream yields the state when the run starts and after each step that
wrote a channel, as LangGraph's does: a step whose nodes wrote nothing, or only where to go
next, yields no item (the state is the one the last item showed)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from stargraph import END, START, Command, Graph


class N(BaseModel):
    n: int = 0


def bump(state: N) -> dict[str, Any]:
    return {"n": state.n + 1}


def look(state: N) -> dict[str, Any]:
    return {}


def jump(state: N) -> Command:
    return Command(goto="bump")


def test_issue46_values_skips_a_step_that_wrote_nothing() -> None:
    app = (
        Graph("quiet_step", state=N)
        .with_node("bump", bump)
        .with_node("look", look)
        .with_edge(START, "look")
        .with_edge("look", "bump")
        .with_edge("bump", END)
        .compile()
    )
    assert list(app.stream({}, mode="values")) == [N(n=0), N(n=1)]
    pairs = list(app.stream({}, mode=["updates", "values"]))
    assert pairs == [
        ("values", N(n=0)),
        ("updates", {"look": {}}),
        ("updates", {"bump": {"n": 1}}),
        ("values", N(n=1)),
    ]


def test_issue46_values_skips_a_step_that_only_routed() -> None:
    app = (
        Graph("routing_step", state=N)
        .with_node("jump", jump, destinations=["bump"])
        .with_node("bump", bump)
        .with_edge(START, "jump")
        .with_edge("bump", END)
        .compile()
    )
    assert list(app.stream({"n": 4}, mode="values")) == [N(n=4), N(n=5)]
