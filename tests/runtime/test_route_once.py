"""A router is called once per step, whatever it returns (a key, a list, ``Send`` objects)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import reducers
from stargraph.graph import END, START, Graph, Send

CALLS: Counter[str] = Counter()


class S(BaseModel):
    items: Annotated[list[str], reducers.append] = []
    width: int = 3
    counter: int = 0


def fork(state: S) -> dict[str, Any]:
    return {"items": ["fork"]}


def fan(state: S) -> list[Send]:
    CALLS["fan"] += 1
    return [Send("work", {"counter": i}) for i in range(state.width)]


def keys(state: S) -> list[str]:
    CALLS["keys"] += 1
    return ["a", "b"]


def work(state: S) -> dict[str, Any]:
    return {"items": [f"w{state.counter}"]}


def a(state: S) -> dict[str, Any]:
    return {"items": ["a"]}


def b(state: S) -> dict[str, Any]:
    return {"items": ["b"]}


def test_issue19_a_router_returning_sends_is_called_once() -> None:
    CALLS.clear()
    app = (
        Graph("sends", state=S)
        .with_node("fork", fork)
        .with_node("work", work)
        .with_edge(START, "fork")
        .with_conditional_edges("fork", fan, ["work"])
        .with_edge("work", END)
        .compile()
    )
    final = app.invoke({"width": 3})
    assert final.items == ["fork", "w0", "w1", "w2"]
    assert CALLS == {"fan": 1}


def test_issue19_a_router_returning_several_keys_is_called_once() -> None:
    CALLS.clear()
    app = (
        Graph("keys", state=S)
        .with_node("fork", fork)
        .with_node("a", a)
        .with_node("b", b)
        .with_edge(START, "fork")
        .with_conditional_edges("fork", keys, ["a", "b"])
        .with_edge("a", END)
        .with_edge("b", END)
        .compile()
    )
    assert app.invoke({}).items == ["fork", "a", "b"]
    assert CALLS == {"keys": 1}
