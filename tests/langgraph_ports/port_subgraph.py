# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Use subgraphs" (different state schemas): a node calls a compiled
subgraph with its own state, transforming the state in and out."""

from typing import TypedDict

EXPECTED = {"foo": "hi! bar baz"}


def run(lg):
    class SubgraphState(TypedDict):
        bar: str
        baz: str

    def subgraph_node_1(state: SubgraphState):
        return {"baz": "baz"}

    def subgraph_node_2(state: SubgraphState):
        return {"bar": state["bar"] + " " + state["baz"]}

    sub = lg.StateGraph(SubgraphState)
    sub.add_node(subgraph_node_1)
    sub.add_node(subgraph_node_2)
    sub.add_edge(lg.START, "subgraph_node_1")
    sub.add_edge("subgraph_node_1", "subgraph_node_2")
    subgraph = sub.compile()

    class State(TypedDict):
        foo: str

    def call_subgraph(state: State):
        response = subgraph.invoke({"bar": state["foo"] + " bar"})
        return {"foo": response["bar"]}

    builder = lg.StateGraph(State)
    builder.add_node("node_1", call_subgraph)
    builder.add_edge(lg.START, "node_1")
    return builder.compile().invoke({"foo": "hi!"})
