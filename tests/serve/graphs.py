"""Graphs the serve tests put behind ``stargraph serve``.

``review``: ``draft`` writes a draft, ``approve`` asks a human (``ctx.interrupt``) and
writes the answer, ``publish`` marks it published. ``counter`` ticks five times.
``held``: ``first``, then ``hold`` waits for a file the test creates, then ``after``.
``chat`` answers through the model of ``ctx.services``; the tests compile it against the
scripted OpenAI-compatible server, so its tokens stream through the real ``openai`` client.
"""

from __future__ import annotations

import time
from pathlib import Path
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


class Held(BaseModel):
    gate: str = ""
    log: Annotated[list[str], reducers.append] = []


def first(state: Held) -> dict[str, Any]:
    return {"log": ["first"]}


def hold(state: Held) -> dict[str, Any]:
    """Wait for the file ``state.gate`` to exist: the test decides when this step ends (the
    deadline only catches a test that forgot to open the gate)."""
    gate = Path(state.gate)
    deadline = time.monotonic() + 60
    while not gate.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never created {gate}")
        time.sleep(0.01)
    return {"log": ["hold"]}


def after(state: Held) -> dict[str, Any]:
    return {"log": ["after"]}


held = (
    Graph("held", state=Held)
    .with_node("first", first)
    .with_node("hold", hold)
    .with_node("after", after)
    .with_edge(START, "first")
    .with_edge("first", "hold")
    .with_edge("hold", "after")
    .with_edge("after", END)
)


class Chat(BaseModel):
    question: str = ""
    answer: str = ""


def ask(state: Chat, ctx: RunContext) -> dict[str, Any]:
    from stargraph.llm import ChatMessage, ChatRequest

    reply = ctx.services["model"].complete(
        ChatRequest(messages=(ChatMessage.user(state.question),))
    )
    return {"answer": reply.message.content}


chat = Graph("chat", state=Chat).with_node("ask", ask).with_edge(START, "ask").with_edge("ask", END)
