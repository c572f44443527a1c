"""Managed values (``RemainingSteps`` fields), the run's thread in ``ctx.thread_id``, and
cache hits flagged on ``node_finished`` events and ``updates`` items."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph
from stargraph.checkpoint import MemoryStore, Recording, SqliteStore
from stargraph.errors import CompileError, InvalidInputError, InvalidWriteError
from stargraph.graph import RemainingSteps
from stargraph.nodes import SubgraphNode
from stargraph.runtime import NodeFinished
from tests.runtime.cachenodes import CALLS, cached_graph
from tests.runtime.managednodes import (
    Budget,
    Threaded,
    budget_loop,
    cheat,
    note,
    thread_skill,
    threaded,
    until_left,
    until_left_async,
)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


# --------------------------------------------------------------------- RemainingSteps


def test_issue46_remaining_steps_field_shows_each_node_the_steps_left() -> None:
    # LangGraph, recursion_limit=6: RemainingSteps is 5, 4, 3, 2 at steps 1..4.
    final = budget_loop().compile(max_steps=6).invoke({})
    assert final.log == [5, 4, 3, 2]
    assert final.left == 0  # never in the output: the field's default
    assert budget_loop().compile().invoke({}, max_steps=4).log == [3, 2]


def test_issue46_routers_see_remaining_steps_as_the_node_they_follow() -> None:
    # until_left reads the managed value: a router that saw its default (0) would end the
    # loop after the first step.
    graph = (
        Graph("budget", state=Budget)
        .with_node("note", note)
        .with_edge(START, "note")
        .with_conditional_edges("note", until_left, ["note", END])
    )
    assert graph.compile(max_steps=6).invoke({}).log == [5, 4, 3, 2]
    assert graph.compile().invoke({}, max_steps=4).log == [3, 2]
    # A router that takes the run context too, asynchronously.
    with_ctx = (
        Graph("budget", state=Budget)
        .with_node("note", note)
        .with_edge(START, "note")
        .with_conditional_edges("note", until_left_async, ["note", END])
    )
    assert with_ctx.compile(max_steps=6).invoke({}).log == [5, 4, 3, 2]


def test_issue46_remaining_steps_field_is_in_the_ir_and_the_hash() -> None:
    (field,) = [f for f in budget_loop().to_ir().state.fields if f.name == "left"]
    assert field.managed == "remaining_steps"

    class Plain(BaseModel):
        log: list[int] = []
        left: int = 0

    plain = Graph("budget", state=Plain).with_node("n", lambda s: None).with_edge(START, "n")

    class Managed(BaseModel):
        log: list[int] = []
        left: Annotated[int, RemainingSteps] = 0

    managed = Graph("budget", state=Managed).with_node("n", lambda s: None).with_edge(START, "n")
    assert plain.to_ir().graph_hash != managed.to_ir().graph_hash


def test_issue46_remaining_steps_replay_sees_what_the_live_run_saw(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    app = budget_loop().compile(store=store, max_steps=6)
    assert app.invoke({}, run_id="r").log == [5, 4, 3, 2]
    # A replay runs to the recorded last step (its own step limit is 4): the values the
    # nodes saw come from the record, so it routes as the live run did.
    again = budget_loop().compile(store=SqliteStore(tmp_path / "runs.db"))
    assert again.replay(Recording.from_store(store, "r"), stub="must").log == [5, 4, 3, 2]


def test_issue46_remaining_steps_is_written_by_no_node_and_set_by_no_input() -> None:
    graph = Graph("cheat", state=Budget).with_node("cheat", cheat).with_edge(START, "cheat")
    with pytest.raises(InvalidWriteError, match=r"'left', a managed value .*RemainingSteps"):
        graph.compile().invoke({})
    with pytest.raises(InvalidInputError, match=r"sets \['left'\].*managed values"):
        budget_loop().compile().invoke({"left": 3})


def test_issue46_remaining_steps_on_a_non_int_field_is_refused() -> None:
    class Wrong(BaseModel):
        left: Annotated[str, RemainingSteps] = ""

    graph = Graph("wrong", state=Wrong).with_node("n", lambda s: None).with_edge(START, "n")
    with pytest.raises(CompileError, match=r"'left' is marked RemainingSteps but its type is str"):
        graph.compile()


# --------------------------------------------------------------------- ctx.thread_id


def test_issue46_thread_id_is_the_runs_thread_live_resumed_and_replayed(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    app = threaded(asking=True).compile(store=store)
    stopped = app.invoke({}, thread_id="chat-7", run_id="t1")
    assert stopped.seen == ["chat-7"]
    # Resumed in a fresh graph (another process would be the same): the record names it.
    fresh = threaded(asking=True).compile(store=SqliteStore(tmp_path / "runs.db"))
    final = fresh.resume("t1", response="yes")
    assert (final.seen, final.answer) == (["chat-7", "chat-7"], "yes")
    assert fresh.replay(Recording.from_store(store, "t1")).seen == ["chat-7", "chat-7"]
    assert app.invoke({}, thread_id="chat-7", run_id="t2").seen[-1] == "chat-7"


def test_issue46_thread_id_is_none_off_threads_and_the_parents_in_a_subgraph() -> None:
    assert threaded().compile().invoke({}).seen == ["None"]
    assert threaded().compile(store=MemoryStore()).invoke({}).seen == ["None"]

    store = MemoryStore()
    app = (
        Graph("outer", state=Threaded)
        .with_node(SubgraphNode.from_skill(thread_skill(), site="child"))
        .with_edge(START, "child")
        .with_edge("child", END)
        .compile(store=store)
    )
    assert app.invoke({}, thread_id="chat-9", run_id="p").seen == ["chat-9"]
    assert app.replay(Recording.from_store(store, "p")).seen == ["chat-9"]


# --------------------------------------------------------------------- cache hits flagged


def test_issue46_cache_hits_are_flagged_on_events_and_updates_and_in_replay() -> None:
    store = MemoryStore()
    app = cached_graph().compile(store=store)

    def finished(run_id: str) -> list[bool]:
        events = app.stream({"question": "why"}, mode="events", run_id=run_id)
        return [e.cached for e in events if isinstance(e, NodeFinished)]

    assert finished("miss") == [False]
    assert finished("hit") == [True]
    assert CALLS == ["why"]
    assert list(app.stream({"question": "why"}, mode="updates")) == [
        {"answer": {"answer": "why? 1"}, "__metadata__": {"cached": True}}
    ]
    assert list(app.stream({"question": "how"}, mode="updates")) == [
        {"answer": {"answer": "how? 2"}}
    ]
    replayed = [e for e in app.replay_stream("hit") if isinstance(e, NodeFinished)]
    assert [e.cached for e in replayed] == [True]
    assert [e.cached for e in app.replay_stream("miss") if isinstance(e, NodeFinished)] == [False]
