# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Build multi-agent systems", handoffs: each agent answers or hands the
conversation to the other with ``Command(goto=..., update=...)``. The model of each agent
is scripted: the travel advisor hands hotels over, the hotel advisor answers."""

from typing import Literal

from tests.langgraph_ports.engines import texts

EXPECTED = [
    ("user", "a hotel in Aruba?"),
    ("assistant", "travel_advisor: handing over to hotel_advisor"),
    ("assistant", "hotel_advisor: try the Bucuti"),
]


def run(lg):
    def travel_advisor(state: lg.MessagesState) -> lg.Command[Literal["hotel_advisor", "__end__"]]:
        if "hotel" in texts(state["messages"])[-1][1]:
            note = lg.ai("travel_advisor: handing over to hotel_advisor")
            return lg.Command(goto="hotel_advisor", update={"messages": [note]})
        return lg.Command(goto=lg.END, update={"messages": [lg.ai("travel_advisor: go")]})

    def hotel_advisor(state: lg.MessagesState) -> lg.Command[Literal["travel_advisor", "__end__"]]:
        return lg.Command(
            goto=lg.END, update={"messages": [lg.ai("hotel_advisor: try the Bucuti")]}
        )

    builder = lg.StateGraph(lg.MessagesState)
    builder.add_node("travel_advisor", travel_advisor)
    builder.add_node("hotel_advisor", hotel_advisor)
    builder.add_edge(lg.START, "travel_advisor")
    graph = builder.compile()
    final = graph.invoke({"messages": [lg.human("a hotel in Aruba?")]})
    return texts(final["messages"])
