# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Map-reduce with the Send API": one joke per subject, the best picked.
The joke model is swapped for a function of the subject."""

import operator
from typing import Annotated, TypedDict

EXPECTED = {
    "topic": "animals",
    "subjects": ["lions", "elephants", "penguins"],
    "jokes": [
        "Why did the lions cross the road?",
        "Why did the elephants cross the road?",
        "Why did the penguins cross the road?",
    ],
    "best_selected_joke": "Why did the elephants cross the road?",
}


def run(lg):
    class OverallState(TypedDict):
        topic: str
        subjects: list[str]
        jokes: Annotated[list[str], operator.add]
        best_selected_joke: str

    class JokeState(TypedDict):
        subject: str

    def generate_topics(state: OverallState):
        return {"subjects": ["lions", "elephants", "penguins"]}

    def generate_joke(state: JokeState):
        return {"jokes": [f"Why did the {state['subject']} cross the road?"]}

    def continue_to_jokes(state: OverallState):
        return [lg.Send("generate_joke", {"subject": s}) for s in state["subjects"]]

    def best_joke(state: OverallState):
        return {"best_selected_joke": max(state["jokes"], key=len)}

    builder = lg.StateGraph(OverallState)
    builder.add_node("generate_topics", generate_topics)
    builder.add_node("generate_joke", generate_joke)
    builder.add_node("best_joke", best_joke)
    builder.add_edge(lg.START, "generate_topics")
    builder.add_conditional_edges("generate_topics", continue_to_jokes, ["generate_joke"])
    builder.add_edge("generate_joke", "best_joke")
    builder.add_edge("best_joke", lg.END)
    graph = builder.compile()
    return graph.invoke({"topic": "animals"})
