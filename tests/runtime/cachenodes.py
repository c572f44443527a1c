"""Cached nodes for the cache tests: module-level so that key refs and replay find them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from pydantic import BaseModel

from stargraph import END, START, Graph
from stargraph.ir import CachePolicyIR


class Ask(BaseModel):
    """The state: a question, a note the key ignores, and the answer."""

    question: str = ""
    note: str = ""
    answer: str = ""


CALLS: list[str] = []
"""Every run of the cached body, in order."""


def answer(state: Ask) -> dict[str, Any]:
    """The expensive node the cache spares."""
    CALLS.append(state.question)
    return {"answer": f"{state.question}? {len(CALLS)}"}


def by_question(state: Ask) -> str:
    """A cache key that leaves the note out."""
    return state.question


def cached_graph(key: Any = None, ttl_s: float | None = None) -> Graph[Ask]:
    """One cached node."""
    policy = CachePolicyIR(key=key, ttl_s=ttl_s)
    return (
        Graph("cached", state=Ask)
        .with_node("answer", answer, cache=policy)
        .with_edge(START, "answer")
        .with_edge("answer", END)
    )


class Clock:
    """An entropy source whose clock the test sets: the run's clock, not the wall's."""

    at: ClassVar[datetime] = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return Clock.at

    def uuid(self) -> str:
        return "00000000-0000-4000-8000-000000000000"

    def random(self) -> float:
        return 0.5

    @classmethod
    def advance(cls, seconds: float) -> None:
        cls.at += timedelta(seconds=seconds)


async def answer_later(state: Ask) -> dict[str, Any]:
    """An async cached node."""
    CALLS.append(f"async {state.question}")
    return {"answer": f"{state.question}! {len(CALLS)}"}


def async_cached_graph() -> Graph[Ask]:
    """One async cached node."""
    return (
        Graph("cached-async", state=Ask)
        .with_node("answer", answer_later, cache=CachePolicyIR())
        .with_edge(START, "answer")
        .with_edge("answer", END)
    )
