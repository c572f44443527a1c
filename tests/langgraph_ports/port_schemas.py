# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Define input and output schemas" and "Pass private state between
nodes": the graph takes a question, answers with only the answer, and a channel only two
nodes declare carries the draft between them."""

from typing import TypedDict

EXPECTED = {"answer": "ANSWER: WHAT IS A KETTLE?"}


def run(lg):
    class InputState(TypedDict):
        question: str

    class OutputState(TypedDict):
        answer: str

    class OverallState(InputState, OutputState):
        pass

    class PrivateState(TypedDict):
        draft: str

    def think(state: InputState) -> PrivateState:
        return {"draft": f"answer: {state['question']}"}

    def write(state: PrivateState) -> OutputState:
        return {"answer": state["draft"].upper()}

    builder = lg.StateGraph(OverallState, input_schema=InputState, output_schema=OutputState)
    builder.add_node("think", think)
    builder.add_node("write", write)
    builder.add_edge(lg.START, "think")
    builder.add_edge("think", "write")
    builder.add_edge("write", lg.END)
    return builder.compile().invoke({"question": "what is a kettle?"})
