# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, Graph API "Define and update state": a channel with a reducer
(``operator.add``) accumulates, one without is overwritten."""

import operator
from typing import Annotated, TypedDict

EXPECTED = {"foo": 2, "bar": ["a", "b", "c"]}


def run(lg):
    class State(TypedDict):
        foo: int
        bar: Annotated[list[str], operator.add]

    def node_1(state: State):
        return {"foo": state["foo"] + 1, "bar": ["b"]}

    def node_2(state: State):
        return {"foo": state["foo"] + 1, "bar": ["c"]}

    builder = lg.StateGraph(State)
    builder.add_sequence([node_1, node_2])
    builder.add_edge(lg.START, "node_1")
    graph = builder.compile()
    return graph.invoke({"foo": 0, "bar": ["a"]})
