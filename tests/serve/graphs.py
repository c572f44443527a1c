"""Graphs the serve tests put behind ``stargraph serve``.

``review``: ``draft`` writes a draft, ``approve`` asks a human (``ctx.interrupt``) and
writes the answer, ``publish`` marks it published. ``chat``: one node that answers each
turn's message through the model of ``ctx.services``; the tests compile it against the
scripted OpenAI-compatible server, so its tokens stream through the real ``openai`` client.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import END, START, Graph, RunContext, reducers


class Review(BaseModel):
    topic: str = ""
    draft: str = ""
    verdict: str = ""
    published: bool = False
    log: Annotated[list[str], reducers.append] = []


def draft(state: Review) -> dict[str, Any]:
    return {"draft": f"a note on {state.topic}", "log": ["draft"]}


def approve(state: Review, ctx: RunContext) -> dict[str, Any]:
    answer = ctx.interrupt({"question": f"publish {state.draft!r}?"})
    return {"verdict": str(answer), "log": ["approve"]}


def publish(state: Review) -> dict[str, Any]:
    return {"published": state.verdict == "yes", "log": ["publish"]}


review = (
    Graph("review", state=Review)
    .with_node("draft", draft)
    .with_node("approve", approve)
    .with_node("publish", publish)
    .with_edge(START, "draft")
    .with_edge("draft", "approve")
    .with_edge("approve", "publish")
    .with_edge("publish", END)
)


class Counter(BaseModel):
    n: int = 0
    steps: Annotated[list[int], reducers.append] = []


def tick(state: Counter) -> dict[str, Any]:
    return {"n": state.n + 1, "steps": [state.n + 1]}


def more(state: Counter) -> str:
    return "tick" if state.n < 5 else END


counter = (
    Graph("counter", state=Counter)
    .with_node("tick", tick)
    .with_edge(START, "tick")
    .with_conditional_edges("tick", more, {"tick": "tick", END: END})
)
