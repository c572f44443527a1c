# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Manage short-term memory", delete messages: after the model answers,
a node removes all but the last two messages with ``RemoveMessage(id=...)``; a thread
keeps the trimmed history for its next turn."""

from tests.langgraph_ports.engines import texts

EXPECTED = {
    "first": [("user", "hi! I'm bob"), ("assistant", "answer 1")],
    "second": [("user", "what's my name?"), ("assistant", "answer 2")],
}


def run(lg):
    def call_model(state: lg.MessagesState):
        answered = sum(1 for role, _ in texts(state["messages"]) if role == "assistant")
        return {"messages": [lg.ai(f"answer {answered + 1}")]}

    def delete_messages(state: lg.MessagesState):
        messages = state["messages"]
        if len(messages) > 2:
            return {"messages": [lg.RemoveMessage(id=m.id) for m in messages[:-2]]}
        return {}

    builder = lg.StateGraph(lg.MessagesState)
    builder.add_sequence([call_model, delete_messages])
    builder.add_edge(lg.START, "call_model")
    graph = builder.compile(checkpointer=lg.InMemorySaver())
    config = {"configurable": {"thread_id": "1"}}
    first = graph.invoke({"messages": [lg.human("hi! I'm bob")]}, config)
    second = graph.invoke({"messages": [lg.human("what's my name?")]}, config)
    return {"first": texts(first["messages"]), "second": texts(second["messages"])}
