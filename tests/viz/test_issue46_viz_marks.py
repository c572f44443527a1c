"""Drawings show a node's closure factory and its cache policy."""

from __future__ import annotations

from stargraph import END, START, CachePolicy, Graph
from stargraph.viz import to_dot, to_mermaid
from tests.grid.features import Flow, make_greeter, tally


def test_issue46_drawings_mark_closure_factories_and_cached_nodes() -> None:
    ir = (
        Graph("marks", state=Flow)
        .with_node("bob", factory=(make_greeter, {"name": "bob"}))
        .with_node("tally", tally, cache=CachePolicy(ttl_s=60))
        .with_edge(START, "bob")
        .with_edge("bob", "tally")
        .with_edge("tally", END)
        .to_ir()
    )
    for text in (to_mermaid(ir), to_dot(ir)):
        assert "[closure: make_greeter(name='bob')]" in text
        assert "[cached 60s]" in text
