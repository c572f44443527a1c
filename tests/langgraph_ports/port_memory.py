# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Add memory": a chatbot over ``MessagesState`` with a checkpointer
remembers the thread's earlier turns; another thread starts empty. The chat model is
swapped for a function that says what it has seen."""

from tests.langgraph_ports.engines import texts

EXPECTED = {
    "bob": [
        ("user", "hi! I'm bob"),
        ("assistant", "turn 1, you are bob"),
        ("user", "what's my name?"),
        ("assistant", "turn 2, you are bob"),
    ],
    "other": [("user", "what's my name?"), ("assistant", "turn 1, you are nobody")],
}


def run(lg):
    def call_model(state: lg.MessagesState):
        said = [m for m in texts(state["messages"]) if m[0] == "user"]
        name = "bob" if any("bob" in content for _, content in said) else "nobody"
        return {"messages": [lg.ai(f"turn {len(said)}, you are {name}")]}

    builder = lg.StateGraph(lg.MessagesState)
    builder.add_node(call_model)
    builder.add_edge(lg.START, "call_model")
    graph = builder.compile(checkpointer=lg.InMemorySaver())
    bob = {"configurable": {"thread_id": "1"}}
    graph.invoke({"messages": [lg.human("hi! I'm bob")]}, bob)
    final = graph.invoke({"messages": [lg.human("what's my name?")]}, bob)
    other = graph.invoke(
        {"messages": [lg.human("what's my name?")]}, {"configurable": {"thread_id": "2"}}
    )
    return {"bob": texts(final["messages"]), "other": texts(other["messages"])}
