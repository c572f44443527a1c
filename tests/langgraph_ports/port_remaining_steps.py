# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Graph API: recursion limit, proactive handling": a node reads the
``RemainingSteps`` managed value and wraps up before the recursion limit instead of
failing with ``GraphRecursionError``."""

import operator
from typing import Annotated, Literal, TypedDict

EXPECTED = {
    "messages": ["thinking...", "thinking...", "thinking...", "Approaching limit, wrapping up..."]
}


def run(lg):
    class State(TypedDict):
        messages: Annotated[list, operator.add]
        remaining_steps: lg.RemainingSteps

    def reasoning_node(state: State):
        remaining = state["remaining_steps"]
        if remaining <= 2:
            return {"messages": ["Approaching limit, wrapping up..."]}
        return {"messages": ["thinking..."]}

    def should_continue(state: State) -> Literal["reasoning", "__end__"]:
        if state["messages"][-1] == "Approaching limit, wrapping up...":
            return lg.END
        return "reasoning"

    builder = lg.StateGraph(State)
    builder.add_node("reasoning", reasoning_node)
    builder.add_edge(lg.START, "reasoning")
    builder.add_conditional_edges("reasoning", should_continue)
    graph = builder.compile()
    return graph.invoke({"messages": []}, {"recursion_limit": 6})
