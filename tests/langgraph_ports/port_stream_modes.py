# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Stream outputs": ``updates`` gives each node's writes, ``values`` the
state after each step, ``custom`` what a node hands to ``get_stream_writer()``."""

from typing import TypedDict

EXPECTED = {
    "updates": [
        {"refine_topic": {"topic": "ice cream and cats"}},
        {"generate_joke": {"joke": "This is a joke about ice cream and cats"}},
    ],
    "values": [
        {"topic": "ice cream"},
        {"topic": "ice cream and cats"},
        {"topic": "ice cream and cats", "joke": "This is a joke about ice cream and cats"},
    ],
    "custom": [{"progress": "writing a joke about ice cream and cats"}],
}


def run(lg):
    class State(TypedDict):
        topic: str
        joke: str

    def refine_topic(state: State):
        return {"topic": state["topic"] + " and cats"}

    def generate_joke(state: State):
        lg.get_stream_writer()({"progress": f"writing a joke about {state['topic']}"})
        return {"joke": f"This is a joke about {state['topic']}"}

    graph = (
        lg.StateGraph(State)
        .add_node(refine_topic)
        .add_node(generate_joke)
        .add_edge(lg.START, "refine_topic")
        .add_edge("refine_topic", "generate_joke")
        .add_edge("generate_joke", lg.END)
        .compile()
    )
    return {
        mode: list(graph.stream({"topic": "ice cream"}, stream_mode=mode))
        for mode in ("updates", "values", "custom")
    }
