"""Closure nodes and their factories, importable so that another process can build them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from stargraph import END, START, Graph


class Talk(BaseModel):
    """The state of the closure graphs."""

    text: str = ""
    out: str = ""


def make_agent(name: str, excited: bool = False) -> Callable[[Talk], dict[str, Any]]:
    """A per-agent node: the agent's name and mood are captured, not configured."""
    mark = "!" if excited else "."

    def agent(state: Talk) -> dict[str, Any]:
        return {"out": f"{name}: {state.text}{mark}"}

    return agent


shout = lambda state: {"out": state.text.upper()}  # noqa: E731 - a module-level lambda node


def agent_graph(name: str = "bob") -> Graph[Talk]:
    """One closure node, built in place: runs here, but no other process can build it."""
    return (
        Graph("talk", state=Talk)
        .with_node("a", make_agent(name))
        .with_edge(START, "a")
        .with_edge("a", END)
    )


def factory_graph(name: str = "bob") -> Graph[Talk]:
    """One closure node built through its factory: any process can build it again."""
    return (
        Graph("talk", state=Talk)
        .with_node("a", factory=(make_agent, {"name": name}))
        .with_edge(START, "a")
        .with_edge("a", END)
        .with_edge("a", END)
    )


def approve(state: Talk) -> dict[str, Any]:
    """A node the run pauses before (so that another process resumes it)."""
    return {"text": f"{state.text} (approved)"}


def paused_graph(factory: bool) -> Graph[Talk]:
    """approve (interrupt before) -> a closure node, built in place or by its factory."""
    graph = Graph("paused", state=Talk).with_node("approve", approve, interrupt_before=True)
    if factory:
        graph = graph.with_node("a", factory=(make_agent, {"name": "bob"}))
    else:
        graph = graph.with_node("a", make_agent("bob"))
    return graph.with_edge(START, "approve").with_edge("approve", "a").with_edge("a", END)


def make_router(word: str) -> Callable[[Talk], str]:
    """A router that sends texts holding ``word`` one way and the rest the other."""

    def route(state: Talk) -> str:
        return "loud" if word in state.text else "quiet"

    return route


def loud(state: Talk) -> dict[str, Any]:
    """One branch."""
    return {"out": "LOUD"}


def quiet(state: Talk) -> dict[str, Any]:
    """The other."""
    return {"out": "quiet"}


def routed_graph(word: str, factory: bool = True) -> Graph[Talk]:
    """A closure router between two branches."""
    graph = Graph("routed", state=Talk).with_node("loud", loud).with_node("quiet", quiet)
    graph = graph.with_node("start", approve).with_edge(START, "start")
    if factory:
        graph = graph.with_conditional_edges(
            "start", mapping=["loud", "quiet"], factory=(make_router, {"word": word})
        )
    else:
        graph = graph.with_conditional_edges("start", make_router(word), ["loud", "quiet"])
    return graph.with_edge("loud", END).with_edge("quiet", END)
