# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Graph API: recursion limit, proactive handling", with the check in the
conditional edge: the router reads the ``RemainingSteps`` managed value (as the node it
follows sees it) and ends the loop before the recursion limit."""

import operator
from typing import Annotated, Literal, TypedDict

EXPECTED = {"messages": ["step, 5 left", "step, 4 left", "step, 3 left", "step, 2 left"]}


def run(lg):
    class State(TypedDict):
        messages: Annotated[list, operator.add]
        remaining_steps: lg.RemainingSteps

    def reasoning_node(state: State):
        return {"messages": [f"step, {state['remaining_steps']} left"]}

    def should_continue(state: State) -> Literal["reasoning", "__end__"]:
        if state["remaining_steps"] <= 2:
            return lg.END
        return "reasoning"

    builder = lg.StateGraph(State)
    builder.add_node("reasoning", reasoning_node)
    builder.add_edge(lg.START, "reasoning")
    builder.add_conditional_edges("reasoning", should_continue)
    graph = builder.compile()
    return graph.invoke({"messages": []}, {"recursion_limit": 6})
