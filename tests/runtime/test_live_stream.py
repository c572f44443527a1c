"""Streams deliver what happens as it happens, in the modes asked for; ``iter`` steps."""

from __future__ import annotations

import asyncio
import io
import threading
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import MemoryStore
from stargraph.errors import InvalidInputError, RunCancelledError
from stargraph.graph import END, START, Graph
from stargraph.runtime import (
    CustomEvent,
    MessageChunk,
    NodeStarted,
    RunContext,
    Superstep,
)

TIMEOUT = 10.0


class S(BaseModel):
    n: int = 0
    said: Annotated[list[str], reducers.append] = []


INSIDE = threading.Event()  # the node is running
RELEASE = threading.Event()  # the test lets it finish
RETURNED = threading.Event()  # the node has returned


def blocked(state: S) -> dict[str, Any]:
    INSIDE.set()
    if not RELEASE.wait(TIMEOUT):
        raise TimeoutError("the test never released the node")
    RETURNED.set()
    return {"n": state.n + 1}


def after(state: S) -> dict[str, Any]:
    return {"n": state.n + 10}


def _reset() -> None:
    INSIDE.clear()
    RELEASE.clear()
    RETURNED.clear()


def _blocking_graph() -> Graph[S]:
    return (
        Graph("live", state=S)
        .with_node("slow", blocked)
        .with_node("after", after)
        .with_edge(START, "slow")
        .with_edge("slow", "after")
        .with_edge("after", END)
    )


def test_issue18_node_started_arrives_while_the_node_still_runs() -> None:
    _reset()
    app = _blocking_graph().compile()
    stream = app.stream({})
    seen = []
    for event in stream:
        seen.append(event.kind)
        if isinstance(event, NodeStarted) and event.node == "slow":
            break
    # The consumer holds node_started of "slow" while "slow" is provably still blocked on
    # an event that only this test sets, after this point.
    assert INSIDE.wait(TIMEOUT)
    assert not RETURNED.is_set()
    RELEASE.set()
    rest = [e.kind for e in stream]
    assert seen == ["run_started", "node_started"]
    assert rest[:2] == ["node_finished", "step_completed"]
    assert rest[-1] == "run_finished"


def test_issue18_astream_delivers_node_started_while_the_node_runs() -> None:
    _reset()
    app = _blocking_graph().compile()

    async def main() -> list[str]:
        kinds: list[str] = []
        async for event in app.astream({}):
            kinds.append(event.kind)
            if isinstance(event, NodeStarted) and event.node == "slow":
                assert await asyncio.to_thread(INSIDE.wait, TIMEOUT)
                assert not RETURNED.is_set()
                RELEASE.set()
        return kinds

    kinds = asyncio.run(main())
    assert kinds[:3] == ["run_started", "node_started", "node_finished"]


def test_issue18_run_live_shows_the_running_node_during_the_step() -> None:
    from rich.console import Console

    from stargraph.cli._live import LiveView, watch

    _reset()
    app = _blocking_graph().compile()
    view = LiveView(Console(file=io.StringIO(), force_terminal=False, width=100))
    running_while_blocked: list[str] = []
    for event in watch(app.stream({}), view):
        if isinstance(event, NodeStarted) and event.node == "slow":
            assert INSIDE.wait(TIMEOUT)
            assert not RETURNED.is_set()
            running_while_blocked = list(view.running)
            RELEASE.set()
    assert running_while_blocked == ["slow"]


# ----------------------------------------------------------------------------------- modes


def one(state: S) -> dict[str, Any]:
    return {"n": state.n + 1}


def two(state: S) -> dict[str, Any]:
    return {"n": state.n + 2, "said": ["two"]}


def _chain() -> Graph[S]:
    return (
        Graph("modes", state=S)
        .with_node("one", one)
        .with_node("two", two)
        .with_edge(START, "one")
        .with_edge("one", "two")
        .with_edge("two", END)
    )


def test_issue18_updates_and_values_modes() -> None:
    app = _chain().compile()
    assert list(app.stream({}, mode="updates")) == [
        {"one": {"n": 1}},
        {"two": {"n": 3, "said": ["two"]}},
    ]
    values = list(app.stream({"n": 5}, mode="values"))
    assert values == [S(n=5), S(n=6), S(n=8, said=["two"])]
    both = list(app.stream({}, mode=["updates", "values"]))
    assert [mode for mode, _ in both] == ["values", "updates", "values", "updates", "values"]
    assert both[-1] == ("values", S(n=3, said=["two"]))
    events = list(app.stream({}, mode="events"))
    assert [e.kind for e in events] == [e.kind for e in app.stream({})]


def test_issue18_an_unknown_mode_is_a_typed_error() -> None:
    with pytest.raises(InvalidInputError, match="'update'"):
        list(_chain().compile().stream({}, mode="update"))  # type: ignore[arg-type]


GO_ON = threading.Event()


def reports(state: S, ctx: RunContext) -> dict[str, Any]:
    ctx.emit({"progress": 0.5})
    # The consumer must get the payload now, not at the end of the step: it sets GO_ON.
    if not GO_ON.wait(TIMEOUT):
        raise TimeoutError("the custom event was not delivered while the node ran")
    ctx.emit({"progress": 1.0})
    return {"n": 1}


def test_issue18_custom_mode_delivers_ctx_emit_live() -> None:
    GO_ON.clear()
    graph = Graph("custom", state=S).with_node("r", reports).with_edge(START, "r")
    app = graph.with_edge("r", END).compile()
    got: list[CustomEvent] = []
    for item in app.stream({}, mode="custom"):
        got.append(item)
        GO_ON.set()
    assert [c.payload for c in got] == [{"progress": 0.5}, {"progress": 1.0}]
    assert got[0].node == "r"
    assert got[0].step == 1
    # Not streamed in mode "custom", ctx.emit does nothing.
    GO_ON.set()
    assert app.invoke({}).n == 1


class FakeChat:
    """A service that binds to a task's journal, as OpenAIChatModel does, and streams a
    fixed answer word by word to ``journal.tokens`` when the run is streamed."""

    def __init__(self) -> None:
        self.sinks: list[bool] = []

    def bind_journal(self, journal: Any) -> BoundChat:
        return BoundChat(self, journal)

    def say(self, text: str) -> str:  # unbound: a run with neither a store nor a stream
        self.sinks.append(False)
        return text


class BoundChat:
    def __init__(self, chat: FakeChat, journal: Any) -> None:
        self.chat = chat
        self.journal = journal

    def say(self, text: str) -> str:
        sink = self.journal.tokens
        self.chat.sinks.append(sink is not None)

        def answer() -> str:
            for word in text.split(" "):
                if sink is not None:
                    sink(word + " ")
            return text

        return str(self.journal.call("chat", "fake", answer, request={"text": text}))


def talks(state: S, ctx: RunContext) -> dict[str, Any]:
    return {"said": [ctx.services["chat"].say("hello big world")]}


@pytest.mark.parametrize("durable", [False, True])
def test_issue18_messages_mode_streams_model_tokens(durable: bool) -> None:
    chat = FakeChat()
    graph = Graph("talk", state=S).with_node("talk", talks).with_edge(START, "talk")
    store = MemoryStore() if durable else None
    app = graph.with_edge("talk", END).compile(services={"chat": chat}, store=store)
    chunks = list(app.stream({}, mode="messages"))
    assert all(isinstance(c, MessageChunk) for c in chunks)
    assert [c.text for c in chunks] == ["hello ", "big ", "world "]
    assert {(c.node, c.step, c.index) for c in chunks} == {("talk", 1, 0)}
    both = list(app.stream({}, mode=["messages", "updates"]))
    assert [m for m, _ in both] == ["messages"] * 3 + ["updates"]
    # Not streamed in that mode, nobody listens: the journal has no token sink.
    chat.sinks.clear()
    app.invoke({})
    list(app.stream({}))
    assert chat.sinks == [False, False]


# ------------------------------------------------------------------------------------ iter


def test_issue18_iter_steps_one_superstep_at_a_time() -> None:
    app = _chain().compile()
    steps = list(app.iter({}))
    assert all(isinstance(s, Superstep) for s in steps)
    assert [(s.step, s.nodes, s.next) for s in steps] == [
        (1, ("one",), ("two",)),
        (2, ("two",), ()),
    ]
    assert steps[-1].state == S(n=3, said=["two"])


def test_issue18_iter_abandoned_between_steps_cancels_the_run_there() -> None:
    store = MemoryStore()
    app = _chain().compile(store=store)
    steps = app.iter({}, run_id="it")
    first = next(steps)
    assert first.step == 1
    steps.close()
    record = store.get_run("it")
    assert record.status == "cancelled"
    assert record.last_step == 1
    assert app.resume("it") == S(n=3, said=["two"])


def test_issue18_a_stream_closed_inside_a_step_commits_that_step_then_cancels() -> None:
    _reset()
    store = MemoryStore()
    app = _blocking_graph().compile(store=store)
    stream = app.stream({}, run_id="c")
    for event in stream:
        if isinstance(event, NodeStarted):
            break
    assert INSIDE.wait(TIMEOUT)
    RELEASE.set()  # the step in flight finishes while the stream closes
    stream.close()
    record = store.get_run("c")
    assert (record.status, record.last_step) == ("cancelled", 1)
    assert app.resume("c").n == 11

    # cancel() between iter steps stops the run at the next boundary, as for invoke.
    def cancel_at_step_one() -> list[int]:
        done = []
        for step in app.iter({}, run_id="d"):
            done.append(step.step)
            app.cancel("d")
        return done

    with pytest.raises(RunCancelledError):
        cancel_at_step_one()
    assert store.get_run("d").last_step == 1


class Inner(BaseModel):
    said: Annotated[list[str], reducers.append] = []


def inner_talks(state: Inner, ctx: RunContext) -> dict[str, Any]:
    ctx.emit("inside")
    return {"said": [ctx.services["chat"].say("deep down")]}


def test_issue18_nested_runs_stream_custom_events_and_tokens_with_their_path() -> None:
    from stargraph.nodes import SubgraphNode
    from stargraph.skills import Skill

    child = Graph("inner", state=Inner).with_node("speak", inner_talks)
    child = child.with_edge(START, "speak").with_edge("speak", END)
    skill = Skill.from_graph(
        child,
        name="inner",
        version="1.0.0",
        kind="workflow",
        description="one step",
        state_schema=Inner,
    )
    parent = (
        Graph("outer", state=S)
        .with_node(SubgraphNode.from_skill(skill, site="site"))
        .with_edge(START, "site")
        .with_edge("site", END)
    )
    app = parent.compile(services={"chat": FakeChat()})
    items = list(app.stream({}, mode=["custom", "messages"]))
    assert [(m, i.path, i.node) for m, i in items] == [
        ("custom", ("site",), "speak"),
        ("messages", ("site",), "speak"),
        ("messages", ("site",), "speak"),
    ]
    assert items[0][1].payload == "inside"
    assert "".join(i.text for m, i in items if m == "messages") == "deep down "


def test_issue18_a_stream_of_inline_nodes_runs_them_on_the_consumer_thread() -> None:
    seen: list[str] = []

    def mark(state: S) -> dict[str, Any]:
        seen.append(threading.current_thread().name)
        return {"n": state.n + 1}

    graph = Graph("inl", state=S).with_node("m", mark, ref="inline-mark", inline=True)
    app = graph.with_edge(START, "m").with_edge("m", END).compile()
    kinds = [e.kind for e in app.stream({})]
    assert kinds[-1] == "run_finished"
    assert seen == [threading.current_thread().name]  # no thread hop for an inline step


def test_issue18_astream_takes_the_same_modes() -> None:
    app = _chain().compile()

    async def main() -> list[Any]:
        return [item async for item in app.astream({}, mode=["updates", "values"])]

    assert asyncio.run(main()) == list(app.stream({}, mode=["updates", "values"]))
