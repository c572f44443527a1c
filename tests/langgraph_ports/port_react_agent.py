# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Build a ReAct agent from scratch": a model node and a tool node in a
loop over ``MessagesState``, ended when the model calls no tool. The chat model is a
scripted one: it asks for the weather once, then answers."""

from typing import Literal

from tests.langgraph_ports.engines import texts

EXPECTED = [
    ("user", "what is the weather in sf?"),
    ("assistant", ""),
    ("tool", "It's sunny in sf"),
    ("assistant", "It is sunny in San Francisco."),
]


def get_weather(location: str) -> str:
    """Call to get the weather from a specific location."""
    return f"It's sunny in {location}"


def run(lg):
    tools_by_name = {"get_weather": get_weather}
    script = [
        lg.ai("", [("call_1", "get_weather", {"location": "sf"})]),
        lg.ai("It is sunny in San Francisco."),
    ]

    def call_model(state: lg.MessagesState):
        turns = sum(1 for role, _ in texts(state["messages"]) if role == "assistant")
        return {"messages": [script[turns]]}

    def tool_node(state: lg.MessagesState):
        outputs = []
        for call_id, name, args in lg.tool_calls(state["messages"][-1]):
            outputs.append(lg.tool_message(tools_by_name[name](**args), call_id))
        return {"messages": outputs}

    def should_continue(state: lg.MessagesState) -> Literal["tools", "__end__"]:
        return "tools" if lg.tool_calls(state["messages"][-1]) else lg.END

    builder = lg.StateGraph(lg.MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("tools", tool_node)
    builder.add_edge(lg.START, "agent")
    builder.add_conditional_edges("agent", should_continue, ["tools", lg.END])
    builder.add_edge("tools", "agent")
    graph = builder.compile()
    final = graph.invoke({"messages": [lg.human("what is the weather in sf?")]})
    return texts(final["messages"])
