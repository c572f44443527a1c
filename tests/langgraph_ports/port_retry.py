# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Add retry policies": a node whose service fails twice with a
``ConnectionError`` is retried by its ``RetryPolicy``; the run ends with the answer."""

from typing import TypedDict

EXPECTED = {"final": {"question": "q", "answer": "answer to q"}, "attempts": 3}


def run(lg):
    attempts = []

    class State(TypedDict):
        question: str
        answer: str

    def call_service(state: State):
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("the service is down")
        return {"answer": f"answer to {state['question']}"}

    builder = lg.StateGraph(State)
    builder.add_node(
        "call_service",
        call_service,
        retry_policy=lg.RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=False),
    )
    builder.add_edge(lg.START, "call_service")
    builder.add_edge("call_service", lg.END)
    final = builder.compile().invoke({"question": "q"})
    return {"final": final, "attempts": len(attempts)}
