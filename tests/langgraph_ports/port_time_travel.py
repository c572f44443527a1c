# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Use time-travel": a run on a thread, its history, then
``update_state(..., as_node=)`` and ``invoke(None)`` to continue from the edited state."""

from typing import TypedDict

EXPECTED = {
    "first": {"topic": "cats", "joke": "a joke about cats"},
    "history": [{"topic": "cats", "joke": "a joke about cats"}, {"topic": "cats"}],
    "edited": {"topic": "dogs", "joke": "a joke about dogs"},
}


def run(lg):
    class State(TypedDict):
        topic: str
        joke: str

    def generate_topic(state: State):
        return {"topic": "cats"}

    def write_joke(state: State):
        return {"joke": f"a joke about {state['topic']}"}

    builder = lg.StateGraph(State)
    builder.add_node("generate_topic", generate_topic)
    builder.add_node("write_joke", write_joke)
    builder.add_edge(lg.START, "generate_topic")
    builder.add_edge("generate_topic", "write_joke")
    builder.add_edge("write_joke", lg.END)
    graph = builder.compile(checkpointer=lg.InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    first = graph.invoke({}, config)
    # Newest first; the checkpoints before any node wrote hold no values.
    history = [snap.values for snap in graph.get_state_history(config) if snap.values]
    graph.update_state(config, {"topic": "dogs"}, as_node="generate_topic")
    edited = graph.invoke(None, config)
    return {"first": first, "history": history, "edited": edited}
