# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Human-in-the-loop, interrupt": a node asks a human to edit a summary,
the run pauses, and ``Command(resume=...)`` continues it on the same thread."""

from typing import TypedDict

EXPECTED = {
    "paused_on": {
        "task": "Please review and edit the generated summary.",
        "summary": "The cat sat",
    },
    "final": {"summary": "The cat sat on the mat (edited)", "reviewed": True},
}


def run(lg):
    class State(TypedDict):
        summary: str
        reviewed: bool

    def generate_summary(state: State):
        return {"summary": "The cat sat"}

    def human_review_edit(state: State):
        result = lg.interrupt(
            {"task": "Please review and edit the generated summary.", "summary": state["summary"]}
        )
        return {"summary": result["edited_summary"], "reviewed": True}

    builder = lg.StateGraph(State)
    builder.add_node("generate_summary", generate_summary)
    builder.add_node("human_review_edit", human_review_edit)
    builder.add_edge(lg.START, "generate_summary")
    builder.add_edge("generate_summary", "human_review_edit")
    builder.add_edge("human_review_edit", lg.END)
    graph = builder.compile(checkpointer=lg.InMemorySaver())
    config = {"configurable": {"thread_id": "review-1"}}
    first = graph.invoke({}, config)
    paused_on = first["__interrupt__"][0].value
    final = graph.invoke(
        lg.Command(resume={"edited_summary": "The cat sat on the mat (edited)"}), config
    )
    return {"paused_on": paused_on, "final": final}
