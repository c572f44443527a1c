# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Create and control loops": b and c run until the list is long enough,
then the router returns END; the recursion limit is given in the config."""

import operator
from typing import Annotated, Literal, TypedDict

EXPECTED = {"aggregate": ["A", "B", "A", "B", "A", "B", "A"]}


def run(lg):
    class State(TypedDict):
        aggregate: Annotated[list, operator.add]

    def a(state: State):
        return {"aggregate": ["A"]}

    def b(state: State):
        return {"aggregate": ["B"]}

    def route(state: State) -> Literal["b", "__end__"]:
        return "b" if len(state["aggregate"]) < 7 else lg.END

    builder = lg.StateGraph(State)
    builder.add_node(a)
    builder.add_node(b)
    builder.add_edge(lg.START, "a")
    builder.add_conditional_edges("a", route)
    builder.add_edge("b", "a")
    graph = builder.compile()
    return graph.invoke({"aggregate": []}, {"recursion_limit": 20})
