# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Use breakpoints": ``interrupt_before`` stops the run before a node;
``get_state`` shows what runs next, and ``invoke(None, config)`` continues."""

from typing import TypedDict

EXPECTED = {
    "paused": {"input": "hello", "log": "step_1"},
    "next": ("step_2",),
    "final": {"input": "hello", "log": "step_1 step_2 step_3"},
}


def run(lg):
    class State(TypedDict):
        input: str
        log: str

    def step_1(state: State):
        return {"log": "step_1"}

    def step_2(state: State):
        return {"log": state["log"] + " step_2"}

    def step_3(state: State):
        return {"log": state["log"] + " step_3"}

    builder = lg.StateGraph(State)
    builder.add_node("step_1", step_1)
    builder.add_node("step_2", step_2)
    builder.add_node("step_3", step_3)
    builder.add_edge(lg.START, "step_1")
    builder.add_edge("step_1", "step_2")
    builder.add_edge("step_2", "step_3")
    builder.add_edge("step_3", lg.END)
    graph = builder.compile(checkpointer=lg.InMemorySaver(), interrupt_before=["step_2"])
    config = {"configurable": {"thread_id": "1"}}
    paused = graph.invoke({"input": "hello"}, config)
    paused.pop("__interrupt__", None)
    nxt = graph.get_state(config).next
    final = graph.invoke(None, config)
    return {"paused": paused, "next": tuple(nxt), "final": final}
