"""A graph with input and output models and a private channel (module-level: refs find it)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import END, START, Graph
from stargraph.graph import Private


class Desk(BaseModel):
    """The state: a public question and answer, a private draft, what a peeker saw."""

    question: str = ""
    draft: Annotated[str, Private] = ""
    answer: str = ""
    seen: str = "nothing"


class Question(BaseModel):
    """What a caller may hand a run."""

    question: str


class Answer(BaseModel):
    """What a run hands back."""

    answer: str


class Drafting(BaseModel):
    """The writer's input: it declares the private draft, so it sees it."""

    question: str
    draft: str = ""


def think(state: Desk) -> dict[str, Any]:
    """Writes the private draft (declared through writes=)."""
    return {"draft": f"draft of {state.question}"}


def peek(state: Desk) -> dict[str, Any]:
    """Declares nothing private: sees the draft's default."""
    return {"seen": repr(state.draft)}


def write(item: Drafting) -> dict[str, Any]:
    """Reads the private draft through its input model."""
    return {"answer": item.draft.upper()}


def desk_graph(**boundary: Any) -> Graph[Desk]:
    """think -> peek -> write."""
    return (
        Graph("desk", state=Desk, **boundary)
        .with_node("think", think, writes=["draft"])
        .with_node("peek", peek)
        .with_node("write", write, input=Drafting)
        .with_edge(START, "think")
        .with_edge("think", "peek")
        .with_edge("peek", "write")
        .with_edge("write", END)
    )
