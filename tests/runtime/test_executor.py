"""The executor: superstep semantics, deterministic merges, events, errors."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.errors import (
    InvalidInputError,
    InvalidWriteError,
    NodeError,
    NodeTimeoutError,
    RunError,
    StepLimitExceeded,
)
from stargraph.examples.basics import fanout_graph, loop_graph, mapreduce_graph
from stargraph.graph import END, START, Graph, Send
from stargraph.runtime import RunContext, RunFinished, SeededEntropy


class State(BaseModel):
    counter: int = 0
    items: Annotated[list[str], reducers.append] = []


def bump(state: State) -> dict[str, Any]:
    return {"counter": state.counter + 1, "items": ["x"]}


def test_authoring_sketch_from_the_architecture() -> None:
    graph = (
        Graph("demo", state=State)
        .with_node("a", bump)
        .with_node("b", bump)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", END)
    )
    app = graph.compile()
    assert app.invoke({"counter": 0}) == State(counter=2, items=["x", "x"])
    assert app.invoke(State(counter=5)).counter == 7
    assert app.graph_hash == graph.to_ir().graph_hash
    events = list(app.stream({"counter": 0}, run_id="r-1"))
    assert [(e.kind, e.step, e.node) for e in events] == [
        ("run_started", 0, None),
        ("node_started", 1, "a"),
        ("node_finished", 1, "a"),
        ("step_completed", 1, None),
        ("node_started", 2, "b"),
        ("node_finished", 2, "b"),
        ("step_completed", 2, None),
        ("run_finished", 2, None),
    ]
    assert {e.run_id for e in events} == {"r-1"}
    assert all(e.path == () for e in events)
    finished = events[2]
    assert finished.kind == "node_finished"
    assert finished.writes == {"counter": 1, "items": ["x"]}
    assert events[-1].kind == "run_finished"
    assert events[-1].state == {"counter": 2, "items": ["x", "x"]}


class Totals(BaseModel):
    total: Annotated[int, reducers.add] = 0
    seen: Annotated[dict[str, int], reducers.merge] = {}
    last: Annotated[str, reducers.replace] = ""
    log: Annotated[list[str], reducers.append] = []
    plain: int = 0


def t_start(state: Totals) -> dict[str, Any]:
    return {"log": ["start"]}


def t_left(state: Totals) -> dict[str, Any]:
    return {"total": 2, "seen": {"left": 1}, "last": "left", "log": ["left"]}


def t_right(state: Totals) -> dict[str, Any]:
    return {"total": 3, "seen": {"right": 1}, "last": "right", "log": ["right"]}


def t_join(state: Totals) -> dict[str, Any]:
    return {"log": [f"join saw {state.total}"], "plain": state.total}


def _diamond() -> Graph[Totals]:
    return (
        Graph("diamond", state=Totals)
        .with_node("start", t_start)
        .with_node("left", t_left)
        .with_node("right", t_right)
        .with_node("join", t_join)
        .with_edge(START, "start")
        .with_edge("start", "left")
        .with_edge("start", "right")
        .with_edge(["left", "right"], "join")
        .with_edge("join", END)
    )


def test_reducers_merge_in_node_id_order_and_join_runs_once() -> None:
    final = _diamond().compile().invoke({})
    assert final.total == 5
    assert final.seen == {"left": 1, "right": 1}
    assert final.last == "right"  # replace: last by node id
    assert final.log == ["start", "left", "right", "join saw 5"]
    assert final.plain == 5


def slow_left(state: Totals) -> dict[str, Any]:
    time.sleep(0.02)
    return {"log": ["left"]}


def test_join_waits_for_branches_of_different_length() -> None:
    graph = (
        Graph("uneven", state=Totals)
        .with_node("start", t_start)
        .with_node("left", t_left)
        .with_node("mid", t_right)
        .with_node("right", t_right)
        .with_node("join", t_join)
        .with_edge(START, "start")
        .with_edge("start", "left")
        .with_edge("start", "mid")
        .with_edge("mid", "right")
        .with_edge(["left", "right"], "join")
        .with_edge("join", END)
    )
    final = graph.compile().invoke({})
    assert final.log == ["start", "left", "right", "right", "join saw 8"]


def w_a(state: State) -> dict[str, Any]:
    return {"counter": 1}


def w_b(state: State) -> dict[str, Any]:
    return {"counter": 2}


def test_parallel_writes_to_a_reducerless_channel_fail() -> None:
    graph = (
        Graph("clash", state=State)
        .with_node("a", w_a)
        .with_node("b", w_b)
        .with_edge(START, "a")
        .with_edge(START, "b")
        .with_edge("a", END)
        .with_edge("b", END)
    )
    with pytest.raises(InvalidWriteError) as info:
        graph.compile().invoke({}, run_id="r")
    assert str(info.value) == (
        "nodes 'a' and 'b' both wrote 'counter' at step 1 of run 'r', and 'counter' has no "
        "reducer; declare one, e.g. Annotated[..., reducers.append], or let only one branch "
        "write it"
    )


def returns_list(state: State) -> Any:
    return ["counter", 1]


def unknown_key(state: State) -> dict[str, Any]:
    return {"counter": 1, "countr": 2}


def wrong_type(state: State) -> dict[str, Any]:
    return {"counter": "many"}


def writes_items(state: State) -> dict[str, Any]:
    return {"items": ["sneaky"]}


def explode(state: State) -> dict[str, Any]:
    raise KeyError("boom")


def _single(fn: Any, **node: Any) -> Graph[State]:
    return (
        Graph("one", state=State)
        .with_node("first", bump)
        .with_node("n", fn, **node)
        .with_edge(START, "first")
        .with_edge("first", "n")
        .with_edge("n", END)
    )


@pytest.mark.parametrize(
    ("fn", "node", "message"),
    [
        (
            returns_list,
            {},
            "node 'n' at step 2 of run 'r': returned list, not a mapping; return a dict of the "
            "channels it changed, e.g. {'counter': 1}, or None",
        ),
        (
            unknown_key,
            {},
            "node 'n' at step 2 of run 'r': wrote key 'countr', which the state State lacks "
            "(fields: ['counter', 'items']); add the field or drop the key",
        ),
        (
            wrong_type,
            {},
            "node 'n' at step 2 of run 'r': wrote an invalid value to 'counter': Input should "
            "be a valid integer, unable to parse string as an integer",
        ),
        (
            writes_items,
            {"writes": ["counter"]},
            "node 'n' at step 2 of run 'r': wrote key 'items' outside its declared writes "
            "['counter']; declare it in with_node(..., writes=[...])",
        ),
    ],
)
def test_bad_writes_name_node_step_and_key(fn: Any, node: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidWriteError) as info:
        _single(fn, **node).compile().invoke({}, run_id="r")
    assert str(info.value) == message
    assert (info.value.node, info.value.step, info.value.run_id) == ("n", 2, "r")


def test_node_exception_is_wrapped_with_cause() -> None:
    events: list[Any] = []

    def consume() -> None:
        events.extend(_single(explode).compile().stream({}, run_id="r"))

    with pytest.raises(NodeError) as info:
        consume()
    assert str(info.value) == "node 'n' failed at step 2 of run 'r': KeyError: 'boom'"
    assert isinstance(info.value.__cause__, KeyError)
    assert events[-1].kind == "run_failed"
    assert events[-1].error_type == "NodeError"
    assert events[-1].node == "n"


def test_step_limit() -> None:
    app = loop_graph().compile(max_steps=5)
    assert app.invoke({"limit": 5}).counter == 5
    with pytest.raises(StepLimitExceeded) as info:
        app.invoke({"limit": 6}, run_id="r")
    assert str(info.value) == (
        "run 'r' reached its step limit of 5 with nodes ['step'] still scheduled; raise "
        "max_steps in compile()/invoke(), or add a rule or edge that ends the loop"
    )
    assert info.value.step == 5
    assert app.invoke({"limit": 6}, max_steps=6).counter == 6


def test_invalid_input() -> None:
    with pytest.raises(InvalidInputError) as info:
        loop_graph().compile().invoke({"counter": "x"}, run_id="r")
    assert str(info.value) == (
        "input of run 'r' does not fit CounterState: counter: Input should be a valid "
        "integer, unable to parse string as an integer"
    )


def bad_router(state: State) -> str:
    return "nowhere"


def test_router_returning_an_undeclared_target() -> None:
    graph = (
        Graph("r", state=State)
        .with_node("a", bump)
        .with_edge(START, "a")
        .with_conditional_edges("a", bad_router, {"x": END})
    )
    with pytest.raises(RunError) as info:
        graph.compile().invoke({}, run_id="r")
    assert str(info.value) == (
        "router 'tests.runtime.test_executor:bad_router' after node 'a' returned 'nowhere' "
        "at step 1 of run 'r', which is not one of its declared targets ['x']; add it to the "
        "mapping of with_conditional_edges"
    )


def test_send_fan_out_map_reduce() -> None:
    final = mapreduce_graph().compile().invoke({"limit": 5})
    assert final.items == ["plan", "work-0", "work-1", "work-2", "work-3", "work-4"]
    assert final.total == 0 + 1 + 2 + 3 + 4
    assert final.counter == 1  # Send payloads overlay only that execution's view


def send_to_unknown(state: State) -> list[Send]:
    return [Send("ghost", {})]


def test_send_to_an_undeclared_target() -> None:
    graph = (
        Graph("s", state=State)
        .with_node("a", bump)
        .with_edge(START, "a")
        .with_conditional_edges("a", send_to_unknown, {"a": "a", "end": END})
    )
    with pytest.raises(RunError, match="returned 'ghost'"):
        graph.compile().invoke({})


# ---------------------------------------------------------------- determinism under concurrency


class Fan(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


def fan_start(state: Fan) -> dict[str, Any]:
    return {"log": ["start"]}


IN_FLIGHT = {"now": 0, "most": 0}
IN_FLIGHT_LOCK = threading.Lock()


def _enter() -> None:
    with IN_FLIGHT_LOCK:
        IN_FLIGHT["now"] += 1
        IN_FLIGHT["most"] = max(IN_FLIGHT["most"], IN_FLIGHT["now"])


def _leave() -> None:
    with IN_FLIGHT_LOCK:
        IN_FLIGHT["now"] -= 1


def sleepy(state: Fan, ctx: RunContext) -> dict[str, Any]:
    _enter()
    time.sleep(random.random() * 0.004)
    _leave()
    return {"log": [ctx.node], "total": int(ctx.node[1:])}


async def asleepy(state: Fan, ctx: RunContext) -> dict[str, Any]:
    _enter()
    await asyncio.sleep(random.random() * 0.004)
    _leave()
    return {"log": [ctx.node], "total": int(ctx.node[1:])}


def fan_join(state: Fan) -> dict[str, Any]:
    return {"log": [f"join:{state.total}"]}


def _fan(body: Any, *, blocking: bool) -> Graph[Fan]:
    names = [f"b{i:02d}" for i in range(20)]
    graph = Graph("fan20", state=Fan).with_node("start", fan_start).with_node("join", fan_join)
    for name in names:
        graph = graph.with_node(name, body, blocking=blocking).with_edge("start", name)
    return graph.with_edge(START, "start").with_edge(names, "join").with_edge("join", END)


def _trace(events: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.kind, e.step, e.node, getattr(e, "writes", None)) for e in events]


@pytest.mark.parametrize(("body", "blocking"), [(sleepy, True), (asleepy, False)])
def test_20_branch_fan_out_is_deterministic_over_50_runs(body: Any, blocking: bool) -> None:
    app = _fan(body, blocking=blocking).compile()
    expected_log = ["start", *[f"b{i:02d}" for i in range(20)], f"join:{sum(range(20))}"]
    first = None
    IN_FLIGHT.update(now=0, most=0)
    for _ in range(50):
        events = list(app.stream({}, run_id="same"))
        assert isinstance(events[-1], RunFinished)
        assert events[-1].state["log"] == expected_log
        trace = _trace(events)
        first = first or trace
        assert trace == first
    # The branches really overlapped (counted, not timed: a busy machine slows everything).
    assert IN_FLIGHT["most"] > 1
    app.close()


def test_async_driver_matches_sync_driver() -> None:
    app = _fan(asleepy, blocking=False).compile()

    async def go() -> tuple[Fan, list[Any]]:
        final = await app.ainvoke({}, run_id="x")
        events = [e async for e in app.astream({}, run_id="x")]
        return final, events

    final, events = asyncio.run(go())
    assert final == app.invoke({}, run_id="x")
    assert _trace(events) == _trace(list(app.stream({}, run_id="x")))


def stamp(state: State, ctx: RunContext) -> dict[str, Any]:
    return {
        "items": [ctx.now().isoformat(), ctx.uuid(), f"{ctx.random():.6f}", ctx.idempotency_key]
    }


def test_run_context_entropy_is_injectable() -> None:
    graph = Graph("ctx", state=State).with_node("s", stamp).with_edge(START, "s")
    graph = graph.with_edge("s", END)
    app = graph.compile(entropy=lambda: SeededEntropy(7))
    one = app.invoke({}, run_id="r").items
    two = app.invoke({}, run_id="r").items
    assert one == two
    assert one[0] == "2026-01-01T00:00:01+00:00"  # step 1 of a seeded run
    assert one[3] == "r//1/s/0"
    real = graph.compile()
    assert real.invoke({}).items[1] != real.invoke({}).items[1]


def sleep_long(state: State) -> dict[str, Any]:
    time.sleep(0.3)
    return {}


async def asleep_long(state: State) -> dict[str, Any]:
    await asyncio.sleep(0.3)
    return {}


@pytest.mark.parametrize("fn", [sleep_long, asleep_long])
def test_node_timeout(fn: Any) -> None:
    app = _single(fn, timeout_s=0.05).compile()
    with pytest.raises(NodeTimeoutError) as info:
        app.invoke({}, run_id="r")
    assert str(info.value) == (
        "node 'n' exceeded its timeout of 0.05s at step 2 of run 'r'; raise timeout_s or make "
        "the node faster"
    )
    assert isinstance(info.value, TimeoutError)
    app.close()


def test_examples_run() -> None:
    assert fanout_graph(4).compile().invoke({}).total == 4


def test_stream_can_be_abandoned_early() -> None:
    stream = loop_graph().compile().stream({"limit": 100})
    first = next(stream)
    assert first.kind == "run_started"
    stream.close()  # must not raise "generator ignored GeneratorExit"


def uses_service(state: State, ctx: RunContext) -> dict[str, Any]:
    return {"items": [ctx.services["greeter"](state.counter)]}


def test_services_reach_nodes_and_stay_out_of_the_hash() -> None:
    graph = Graph("svc", state=State).with_node("s", uses_service).with_edge(START, "s")
    graph = graph.with_edge("s", END)
    one = graph.compile(services={"greeter": lambda n: f"hello {n}"})
    two = graph.compile(services={"greeter": lambda n: f"bye {n}"})
    assert one.invoke({"counter": 2}).items == ["hello 2"]
    assert two.invoke({"counter": 2}).items == ["bye 2"]
    assert one.graph_hash == two.graph_hash
