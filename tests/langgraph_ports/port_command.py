# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Combine control flow and state updates with Command": node_a writes
and picks its successor in one return; the targets are in the return annotation."""

from typing import Literal, TypedDict

EXPECTED = {"foo": "bc"}


def run(lg):
    class State(TypedDict):
        foo: str

    def node_a(state: State) -> lg.Command[Literal["node_b", "node_c"]]:
        value = "b" if len(state["foo"]) % 2 == 0 else "c"
        goto = "node_b" if value == "b" else "node_c"
        return lg.Command(update={"foo": value}, goto=goto)

    def node_b(state: State):
        return {"foo": state["foo"] + "c"}

    def node_c(state: State):
        return {"foo": state["foo"] + "b"}

    builder = lg.StateGraph(State)
    builder.add_edge(lg.START, "node_a")
    builder.add_node(node_a)
    builder.add_node(node_b)
    builder.add_node(node_c)
    graph = builder.compile()
    return graph.invoke({"foo": ""})
