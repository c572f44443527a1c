"""Node caching: repeated inputs are served, the policy is hashed, hits are in the stream
and the record, TTL follows the run's clock, and replay serves the recorded writes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from stargraph.checkpoint import MemoryStore, SqliteStore, StoreFeature
from stargraph.errors import CheckpointError
from stargraph.runtime import CustomEvent
from stargraph.workers import Worker, submit
from tests.runtime.cachenodes import CALLS, Clock, by_question, cached_graph


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


def test_issue46_cache_serves_a_repeated_input_without_running_the_node() -> None:
    app = cached_graph().compile()
    first = app.invoke({"question": "why"})
    again = app.invoke({"question": "why"})
    other = app.invoke({"question": "how"})
    assert CALLS == ["why", "how"]
    assert again.answer == first.answer == "why? 1"
    assert other.answer == "how? 2"


def test_issue46_cache_key_function_chooses_what_counts_as_the_same_input() -> None:
    app = cached_graph(key=by_question).compile()
    app.invoke({"question": "why", "note": "a"})
    app.invoke({"question": "why", "note": "b"})
    assert CALLS == ["why"]
    default = cached_graph().compile()
    default.invoke({"question": "why", "note": "a"})
    default.invoke({"question": "why", "note": "b"})
    assert CALLS == ["why", "why", "why"]


def test_issue46_cache_policy_is_in_the_graph_hash() -> None:
    hashes = {
        cached_graph().graph_hash,
        cached_graph(ttl_s=60).graph_hash,
        cached_graph(key=by_question).graph_hash,
    }
    assert len(hashes) == 3
    node = cached_graph(key=by_question).to_ir().nodes[0]
    assert node.cache is not None  # type: ignore[union-attr]
    assert node.cache.key == "tests.runtime.cachenodes:by_question"  # type: ignore[union-attr]


def test_issue46_cache_ttl_is_measured_by_the_runs_clock() -> None:
    app = cached_graph(ttl_s=60).compile(entropy=Clock)
    app.invoke({"question": "why"})
    Clock.advance(30)
    app.invoke({"question": "why"})
    assert CALLS == ["why"]
    Clock.advance(60)
    app.invoke({"question": "why"})
    assert CALLS == ["why", "why"]


def test_issue46_cache_hits_are_marked_in_the_stream_and_the_step_record(tmp_path: Path) -> None:
    app = cached_graph().compile(store=SqliteStore(tmp_path / "db.sqlite"))
    app.invoke({"question": "why"}, run_id="miss")
    events = list(app.stream({"question": "why"}, mode="custom", run_id="hit"))
    hits = [e.payload for e in events if isinstance(e, CustomEvent)]
    assert [(h["cache"], h["node"]) for h in hits] == [("hit", "answer")]

    def lookups(run_id: str) -> list[bool]:
        return [
            call.value["hit"]
            for step in app.history(run_id)
            for call in step.calls
            if call.kind == "cache"
        ]

    assert lookups("miss") == [False]
    assert lookups("hit") == [True]
    assert CALLS == ["why"]


def test_issue46_cache_entries_outlive_the_store_object_with_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    cached_graph().compile(store=SqliteStore(path)).invoke({"question": "why"})
    cached_graph().compile(store=SqliteStore(path)).invoke({"question": "why"})
    assert CALLS == ["why"]


@pytest.mark.parametrize("first", ["miss", "hit"])
def test_issue46_replay_serves_the_recorded_writes_hit_or_not(first: str) -> None:
    app = cached_graph().compile(store=MemoryStore())
    if first == "hit":
        app.invoke({"question": "why"})
    live = app.invoke({"question": "why"}, run_id="r")
    calls = list(CALLS)
    # An emptied cache and a body that would answer differently change nothing in replay.
    replayed = cached_graph().compile(store=app.store).replay("r")
    assert replayed == live
    assert CALLS == calls == ["why"]


def test_issue46_async_nodes_are_cached_too() -> None:
    from tests.runtime.cachenodes import async_cached_graph

    app = async_cached_graph().compile()
    first = app.invoke({"question": "why"})
    again = asyncio.run(app.ainvoke({"question": "why"}))
    assert first.answer == again.answer == "why! 1"
    assert CALLS == ["async why"]


class _OwnStore(MemoryStore):
    """A user's own store: it declares no features, so it keeps no node cache."""

    features: ClassVar[frozenset[StoreFeature]] = frozenset()


def test_issue46_cache_of_a_store_without_the_feature_belongs_to_each_compiled_graph() -> None:
    store = _OwnStore()
    app = cached_graph().compile(store=store)
    app.invoke({"question": "why"})
    assert app.invoke({"question": "why"}).answer == "why? 1"
    assert CALLS == ["why"]
    # Another graph on the same store object starts with a cache of its own: nothing keyed
    # by the store outlives the graphs compiled with it.
    assert cached_graph().compile(store=store).invoke({"question": "why"}).answer == "why? 2"
    assert CALLS == ["why", "why"]


def test_issue46_worker_runs_keep_entries_in_the_stores_database(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    for run_id in ("w1", "w2"):
        submit(db, "tests.runtime.cachenodes:cached_graph", {"question": "why"}, run_id=run_id)
    with Worker(db, lease_s=30) as worker:
        assert [worker.run_once(), worker.run_once()] == ["done", "done"]
    with SqliteStore(db) as store:
        assert cached_graph().compile(store=store).invoke({"question": "why"}).answer == "why? 1"
    assert CALLS == ["why"]


def test_issue46_a_sqlite_stores_cache_fails_as_the_store_does(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite")
    cache = store.node_cache()
    cache.put("k", {"answer": "a"}, None)
    store.close()
    with pytest.raises(CheckpointError, match="is closed"):
        cache.get("k")
    with SqliteStore(tmp_path / "db.sqlite") as again:
        assert again.node_cache().get("k") == ({"answer": "a"}, None)
