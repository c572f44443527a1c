"""A replay hands its recordings down explicitly: a subgraph node replays its child from the
source of the replay it is part of, never from whichever replay of the same run id happens
to be running (there is no process-wide table of replays to look it up in)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph
from stargraph.checkpoint import MemoryStore, Recording
from stargraph.errors import ReplayError
from stargraph.nodes import SubgraphNode
from stargraph.replay import export_cassette, load_cassette
from stargraph.runtime._replay import replay_child
from tests.runtime.incskill import inc_skill


class Outer(BaseModel):
    x: int = 0


def first(state: Outer) -> dict[str, Any]:
    return {"x": state.x + 10}


def build() -> Graph[Outer]:
    # Step 1 is a plain node, step 2 the subgraph node: a replay is under way (between
    # steps) before it replays the child.
    return (
        Graph("outer", state=Outer)
        .with_node("first", first)
        .with_node(SubgraphNode.from_skill(inc_skill(), site="inc"))
        .with_edge(START, "first")
        .with_edge("first", "inc")
        .with_edge("inc", END)
    )


def test_interleaved_replays_of_one_run_id_each_use_their_own_recordings(tmp_path: Path) -> None:
    store = MemoryStore()
    live = build().compile(store=store)
    assert live.invoke({}, run_id="r").x == 11
    cassette = load_cassette(export_cassette(store, "r", tmp_path / "r.json"))
    # The same run, without its child runs, replayed by a graph with no store: its
    # subgraph node has nowhere to find the child's recording.
    bare = Recording.from_store(store, "r")
    offline = build().compile()

    from_cassette = offline.replay_stream(cassette)
    next(from_cassette)  # the cassette's replay is under way, its step 1 replayed
    from_bare = offline.replay_stream(bare)
    next(from_bare)  # a second replay of run "r" is under way too
    try:
        # The cassette's replay reaches the subgraph node: its child comes from the
        # cassette, whatever other replay of "r" started since.
        kinds = [event.kind for event in from_cassette]
        assert "run_finished" in kinds
        assert offline.replay(cassette).x == 11
        with pytest.raises(ReplayError, match="not in a store"):
            list(from_bare)
    finally:
        from_bare.close()
        from_cassette.close()


def test_a_child_replay_needs_the_source_of_its_parent_replay() -> None:
    child = build().compile().specs["inc"].fn.child  # type: ignore[attr-defined]
    with pytest.raises(ReplayError, match="outside a replay of its parent"):
        replay_child(
            child.steploop,
            {"x": 1},
            run_id="r::inc@2.0",
            source=None,
            parent_run_id="r",
            path=("inc",),
            emit=None,
        )
