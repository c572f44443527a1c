"""LangGraph semantics the layer keeps, each checked on both engines: what ``values``
streams and ``get_state`` show (every channel) against what ``invoke`` returns (the output
schema), ``output_keys``, cache hits flagged in ``updates``, pending tasks with their
interrupts in ``get_state`` and answered by id, and the thread in a node's ``config``."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest

from tests.langgraph_ports import engines

ENGINES = {"langgraph": engines.langgraph_engine, "stargraph": engines.stargraph_engine}


@pytest.fixture(params=sorted(ENGINES))
def lg(request: pytest.FixtureRequest) -> engines.Engine:
    return ENGINES[request.param]()


class Question(TypedDict):
    q: str


class Answer(TypedDict):
    a: str


class Overall(TypedDict):
    q: str
    a: str


class Draft(TypedDict):
    draft: str


def think(state: Question) -> Draft:
    return {"draft": state["q"] + "!"}


def write(state: Draft) -> Answer:
    return {"a": state["draft"] + "?"}


def _schemas(lg: engines.Engine) -> Any:
    builder = lg.StateGraph(Overall, input_schema=Question, output_schema=Answer)
    builder.add_node("think", think)
    builder.add_node("write", write)
    builder.add_edge(lg.START, "think")
    builder.add_edge("think", "write")
    builder.add_edge("write", lg.END)
    return builder.compile(checkpointer=lg.InMemorySaver())


def test_issue46_values_and_get_state_show_every_channel_invoke_the_output(
    lg: engines.Engine,
) -> None:
    graph = _schemas(lg)
    config = {"configurable": {"thread_id": "t"}}
    assert list(graph.stream({"q": "hi"}, config, stream_mode="values")) == [
        {"q": "hi"},
        {"q": "hi", "draft": "hi!"},
        {"q": "hi", "draft": "hi!", "a": "hi!?"},
    ]
    assert graph.get_state(config).values == {"q": "hi", "draft": "hi!", "a": "hi!?"}
    assert graph.invoke({"q": "hi"}, {"configurable": {"thread_id": "u"}}) == {"a": "hi!?"}
    picked = graph.stream(
        {"q": "hi"}, {"configurable": {"thread_id": "v"}}, stream_mode="values", output_keys=["a"]
    )
    assert list(picked) == [{"a": "hi!?"}]


class Counted(TypedDict):
    n: int
    out: Annotated[list[int], operator.add]


CACHED_RUNS: list[int] = []


def slow_double(state: Counted) -> dict[str, Any]:
    CACHED_RUNS.append(state["n"])
    return {"out": [state["n"] * 2]}


def test_issue46_a_cache_hit_is_flagged_in_updates(lg: engines.Engine) -> None:
    CACHED_RUNS.clear()
    builder = lg.StateGraph(Counted)
    builder.add_node("double", slow_double, cache_policy=lg.CachePolicy())
    builder.add_edge(lg.START, "double")
    builder.add_edge("double", lg.END)
    graph = builder.compile(cache=lg.InMemoryCache())
    first = list(graph.stream({"n": 2, "out": []}, stream_mode="updates"))
    again = list(graph.stream({"n": 2, "out": []}, stream_mode="updates"))
    assert first == [{"double": {"out": [4]}}]
    assert again == [{"double": {"out": [4]}, "__metadata__": {"cached": True}}]
    assert CACHED_RUNS == [2]


class Asked(TypedDict):
    log: Annotated[list[str], operator.add]


def _asking(lg: engines.Engine) -> Any:
    def a(state: Asked) -> dict[str, Any]:
        return {"log": ["a"]}

    def b(state: Asked) -> dict[str, Any]:
        return {"log": [lg.interrupt("b?")]}

    def c(state: Asked) -> dict[str, Any]:
        return {"log": [lg.interrupt("c?")]}

    builder = lg.StateGraph(Asked)
    for fn in (a, b, c):
        builder.add_node(fn.__name__, fn)
    builder.add_edge(lg.START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("a", "c")
    return builder.compile(checkpointer=lg.InMemorySaver())


def test_issue46_get_state_lists_pending_tasks_with_their_interrupts(lg: engines.Engine) -> None:
    graph = _asking(lg)
    config = {"configurable": {"thread_id": "t"}}
    stopped = graph.invoke({"log": []}, config)
    assert [i.value for i in stopped["__interrupt__"]] == ["b?", "c?"]
    snapshot = graph.get_state(config)
    assert snapshot.next == ("b", "c")
    assert [(t.name, [i.value for i in t.interrupts]) for t in snapshot.tasks] == [
        ("b", ["b?"]),
        ("c", ["c?"]),
    ]
    assert [i.id for i in snapshot.interrupts] == [i.id for i in stopped["__interrupt__"]]
    answers = {i.id: f"{i.value}!" for i in snapshot.interrupts}
    assert graph.invoke(lg.Command(resume=answers), config) == {"log": ["a", "b?!", "c?!"]}
    done = graph.get_state(config)
    assert (done.next, done.tasks, done.interrupts) == ((), (), ())


def thread_of(state: Asked, config):  # type: ignore[no-untyped-def]  # LangGraph warns on Any
    return {"log": [str(config["configurable"].get("thread_id"))]}


def test_issue46_a_node_reads_its_thread_from_config(lg: engines.Engine) -> None:
    builder = lg.StateGraph(Asked)
    builder.add_node("thread_of", thread_of)
    builder.add_edge(lg.START, "thread_of")
    graph = builder.compile(checkpointer=lg.InMemorySaver())
    config = {"configurable": {"thread_id": "chat-7"}}
    assert graph.invoke({"log": []}, config) == {"log": ["chat-7"]}
    assert graph.invoke({"log": []}, config) == {"log": ["chat-7", "chat-7"]}
