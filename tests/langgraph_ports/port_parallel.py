# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Run graph nodes in parallel": a fans out to b and c, d joins them."""

import operator
from typing import Annotated, Any, TypedDict

EXPECTED = {"aggregate": ["A", "B", "C", "D"]}


def run(lg):
    class State(TypedDict):
        aggregate: Annotated[list, operator.add]

    def a(state: State):
        return {"aggregate": ["A"]}

    def b(state: State):
        return {"aggregate": ["B"]}

    def c(state: State):
        return {"aggregate": ["C"]}

    def d(state: State):
        return {"aggregate": ["D"]}

    builder = lg.StateGraph(State)
    builder.add_node(a)
    builder.add_node(b)
    builder.add_node(c)
    builder.add_node(d)
    builder.add_edge(lg.START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("a", "c")
    builder.add_edge(["b", "c"], "d")
    builder.add_edge("d", lg.END)
    graph = builder.compile()
    result: Any = graph.invoke({"aggregate": []})
    return result
