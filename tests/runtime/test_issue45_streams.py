"""Streams at invoke speed: ``updates``/``values`` streams run their steps as ``invoke`` does,
items made at the step boundaries; engine-made events equal validated ones."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import MemoryStore
from stargraph.graph import END, START, Graph
from stargraph.runtime import (
    Event,
    NodeFinished,
    NodeStarted,
    RuleDecided,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunStarted,
    StepCompleted,
)
from stargraph.runtime._events import made

TIMEOUT = 30.0  # only to catch a hang

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


class S(BaseModel):
    n: int = 0
    seen: Annotated[list[str], reducers.append] = []


def looks(state: S) -> dict[str, Any]:
    return {"n": state.n + 1, "seen": [f"{REQUEST.get()}@{threading.current_thread().name}"]}


def _chain() -> Graph[S]:
    return (
        Graph("ctx", state=S)
        .with_node("a", looks)
        .with_node("b", looks)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", END)
    )


@pytest.mark.parametrize("mode", ["updates", "values"])
def test_issue45_updates_and_values_streams_run_nodes_as_invoke_does(mode: str) -> None:
    """A node of an ``updates``/``values`` stream runs where ``invoke`` runs it: on the
    consumer's thread, seeing the consumer's context variables (a request id, a trace)."""
    app = _chain().compile()
    here = f"req-1@{threading.current_thread().name}"
    token = REQUEST.set("req-1")
    try:
        invoked = app.invoke({}).seen
        items = list(app.stream({}, mode=mode))  # type: ignore[arg-type]
    finally:
        REQUEST.reset(token)
    assert invoked == [here, here]
    if mode == "updates":
        assert items == [{"a": {"n": 1, "seen": [here]}}, {"b": {"n": 2, "seen": [here]}}]
    else:
        assert items == [S(), S(n=1, seen=[here]), S(n=2, seen=[here, here])]


def test_issue45_astream_updates_runs_sync_nodes_in_the_callers_context() -> None:
    """``astream`` in ``updates`` runs a lone sync node on the loop as ``ainvoke`` does,
    in the awaiting task's context."""
    app = _chain().compile()

    async def main() -> tuple[list[str], list[Any]]:
        REQUEST.set("req-2")
        state = await app.ainvoke({})
        return state.seen, [item async for item in app.astream({}, mode="updates")]

    seen, items = asyncio.run(main())
    assert [s.split("@")[0] for s in seen] == ["req-2", "req-2"]
    assert [next(iter(i.values()))["seen"][0].split("@")[0] for i in items] == ["req-2"] * 2


def test_issue45_a_values_stream_closed_after_its_first_state_commits_step_one() -> None:
    """Closed once the consumer read the state the run starts from, the first step (begun:
    its start was handed on) runs and commits, then the run ends cancelled there, as a
    stream closed inside a step always did."""
    store = MemoryStore()
    app = _chain().compile(store=store)
    stream = app.stream({}, mode="values", run_id="v")
    assert next(stream) == S()
    stream.close()
    record = store.get_run("v")
    assert (record.status, record.last_step) == ("cancelled", 1)
    assert app.get_state("v").n == 1
    assert app.resume("v").n == 2


def test_issue45_multi_mode_streams_keep_their_order_and_own_dicts() -> None:
    app = _chain().compile()
    items = list(app.stream({}, mode=["events", "updates", "values"]))
    kinds = [m if m != "events" else item.kind for m, item in items]
    assert kinds == [
        "run_started",
        "values",
        "node_started",
        "node_finished",
        "updates",
        "step_completed",
        "values",
        "node_started",
        "node_finished",
        "updates",
        "step_completed",
        "values",
        "run_finished",
    ]
    finished = [item for m, item in items if m == "events" and isinstance(item, NodeFinished)]
    updates = [item for m, item in items if m == "updates"]
    assert [{f.node: f.writes} for f in finished] == updates
    updates[0]["a"]["n"] = 99  # a consumer's edit of one item leaves the other alone
    assert finished[0].writes["n"] == 1


_SAMPLES: list[tuple[type[Any], dict[str, Any]]] = [
    (RunStarted, {"graph_hash": "sha256:ab", "resumed": True}),
    (RunStarted, {"graph_hash": "sha256:ab"}),
    (NodeStarted, {"node": "a", "index": 2}),
    (NodeFinished, {"node": "a", "index": 1, "writes": {"n": 1}, "attempts": 3}),
    (NodeFinished, {"node": "a"}),
    (StepCompleted, {"nodes": ("a", "b"), "next": ()}),
    (RuleDecided, {"decision": "goto", "rule": "r", "target": "b", "reason": None}),
    (RunInterrupted, {"node": "a", "payload": {"kind": "node", "value": [1, 2]}}),
    (RunFinished, {"state": {"n": 2}, "stopped_by": None, "status": "halted"}),
    (RunCancelled, {"reason": "its event stream was closed"}),
    (RunFailed, {"node": None, "error": "boom", "error_type": "NodeError"}),
]


@pytest.mark.parametrize(("kind", "fields"), _SAMPLES)
def test_issue45_engine_made_events_equal_validated_ones(
    kind: type[Any], fields: dict[str, Any]
) -> None:
    """The events the engine builds without validation are the validated ones: equal,
    with the same fields set, the same JSON and repr, and their own default values."""
    base = {"run_id": "run-1", "step": 3, "path": ("sub",)}
    cheap = made(kind, {**base, **fields})
    valid = kind(**base, **fields)
    assert cheap == valid
    assert cheap.model_fields_set == valid.model_fields_set
    assert cheap.model_dump_json() == valid.model_dump_json()
    assert repr(cheap) == repr(valid)
    if kind is NodeFinished and "writes" not in fields:
        assert made(kind, dict(base, **fields)).writes is not cheap.writes


def test_issue45_streamed_events_round_trip_as_validated_events() -> None:
    """Every event a stream hands on validates back to itself (valid by construction)."""
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Event] = TypeAdapter(Event)
    app = _chain().compile(store=MemoryStore())
    events = list(app.stream({}))
    assert events
    for event in events:
        assert adapter.validate_python(event.model_dump()) == event


@pytest.mark.parametrize("cached", [False, True])
def test_issue45_node_and_step_event_makers_equal_validated_events(cached: bool) -> None:
    """The dedicated makers of the events an ``events`` stream makes per task and step
    build what validation builds: equal, same fields set, JSON and repr."""
    from stargraph.runtime._events import node_finished, node_started, step_completed

    base = {"run_id": "run-1", "step": 3, "path": ("sub",)}
    finished: dict[str, Any] = {"node": "a", "index": 1, "writes": {"n": 1}, "attempts": 2}
    if cached:
        finished["cached"] = True
    pairs = [
        (node_started("run-1", 3, ("sub",), "a", 2), NodeStarted(**base, node="a", index=2)),
        (
            node_finished("run-1", 3, ("sub",), "a", 1, writes={"n": 1}, attempts=2, cached=cached),
            NodeFinished(**base, **finished),
        ),
        (
            step_completed("run-1", 3, ("sub",), ("a", "b"), ("c",)),
            StepCompleted(**base, nodes=("a", "b"), next=("c",)),
        ),
    ]
    for cheap, valid in pairs:
        assert cheap == valid
        assert cheap.model_fields_set == valid.model_fields_set
        assert cheap.model_dump_json() == valid.model_dump_json()
        assert repr(cheap) == repr(valid)


def _handoffs() -> list[Any]:
    from stargraph.runtime._tasks import _WATCHDOG, Handoff

    return [b for b in list(_WATCHDOG.active.values()) if isinstance(b, Handoff)]


def test_issue45_an_events_stream_lets_go_of_its_handoff_however_it_ends() -> None:
    """An events stream's step hand-off is watched for the whole run: read to its end,
    closed between steps or closed after a step's start, the watchdog holds none of it
    afterwards (no run kept alive by a stream that ended)."""
    app = _chain().compile()
    before = len(_handoffs())
    assert [e.kind for e in app.stream({})][-1] == "run_finished"
    assert len(_handoffs()) == before
    stream = app.stream({})
    assert next(stream).kind == "run_started"
    assert next(stream).kind == "node_started"  # the first step was offered
    stream.close()
    assert len(_handoffs()) == before
