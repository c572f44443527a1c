"""What ``stargraph.langgraph`` adds over the ports: native runs underneath, and typed
errors where LangGraph's semantics cannot be kept."""

from __future__ import annotations

import asyncio
import operator
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.errors import UsageError
from stargraph.langgraph import (
    END,
    START,
    CachePolicy,
    Command,
    RetryPolicy,
    StateGraph,
    interrupt,
)


class Ticket(TypedDict):
    text: str
    log: Annotated[list[str], operator.add]


def classify(ticket: Ticket) -> dict[str, Any]:
    return {"log": [f"classify {ticket['text']}"]}


def approve(ticket: Ticket) -> dict[str, Any]:
    return {"log": [f"approved={interrupt('refund?')}"]}


def with_config(ticket: Ticket, config: dict[str, Any]) -> dict[str, Any]:
    return {"log": [f"thread={config['configurable'].get('thread_id')}"]}


def _builder() -> StateGraph:
    builder = StateGraph(Ticket)
    builder.add_node(classify)
    builder.add_node(approve)
    builder.add_edge(START, "classify")
    builder.add_edge("classify", "approve")
    builder.add_edge("approve", END)
    return builder


def test_issue46_a_sqlite_checkpointer_resumes_the_thread_in_another_compiled_graph(
    tmp_path: Path,
) -> None:
    config = {"configurable": {"thread_id": "t-1"}}
    first = _builder().compile(checkpointer=SqliteStore(tmp_path / "runs.db"))
    paused = first.invoke({"text": "invoice"}, config)
    assert [i.value for i in paused["__interrupt__"]] == ["refund?"]
    again = _builder().compile(checkpointer=SqliteStore(tmp_path / "runs.db"))
    assert again.get_state(config).next == ("approve",)
    final = again.invoke(Command(resume=True), config)
    assert final == {"text": "invoice", "log": ["classify invoice", "approved=True"]}
    # Underneath it is a native run: hashed, and replayable offline.
    assert again.native.graph_hash == first.native.graph_hash
    run_id = again.native.get_thread("t-1")[-1].run_id
    assert again.native.replay(run_id).log == final["log"]


def test_issue46_a_node_taking_config_sees_the_thread() -> None:
    builder = StateGraph(Ticket)
    builder.add_node(with_config)
    builder.add_edge(START, "with_config")
    app = builder.compile(checkpointer=True)
    out = app.invoke({"text": "x"}, {"configurable": {"thread_id": "th"}})
    assert out["log"] == ["thread=th"]


def test_issue46_ainvoke_and_stream_mode_lists() -> None:
    builder = StateGraph(Ticket)
    builder.add_node(classify)
    builder.add_edge(START, "classify")
    app = builder.compile()
    assert asyncio.run(app.ainvoke({"text": "a"}))["log"] == ["classify a"]
    pairs = list(app.stream({"text": "b"}, stream_mode=["updates", "values"]))
    assert ("updates", {"classify": {"log": ["classify b"]}}) in pairs
    assert pairs[-1] == ("values", {"text": "b", "log": ["classify b"]})


def test_issue46_what_cannot_be_mapped_is_refused_with_a_typed_error() -> None:
    with pytest.raises(UsageError, match="checkpointer"):
        _builder().compile(checkpointer=object())
    with pytest.raises(UsageError, match="long-term memory"):
        _builder().compile(store=object())
    with pytest.raises(UsageError, match="retry_on"):
        RetryPolicy(retry_on=lambda exc: True)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="outside a node"):
        interrupt("?")
    app = _builder().compile()
    with pytest.raises(UsageError, match="thread"):
        app.invoke(Command(resume=True))
    with pytest.raises(UsageError, match="update_state"):
        app.invoke(Command(goto="approve"), {"configurable": {"thread_id": "t"}})


class Counter(TypedDict):
    x: int
    y: int


CACHED_CALLS: list[int] = []


def doubled(state: Counter) -> dict[str, Any]:
    CACHED_CALLS.append(state["x"])
    return {"y": state["x"] * 2}


def test_issue46_cache_policy_serves_a_seen_input_again() -> None:
    CACHED_CALLS.clear()
    builder = StateGraph(Counter)
    builder.add_node(doubled, cache_policy=CachePolicy(ttl=60))
    builder.add_edge(START, "doubled")
    app = builder.compile()
    assert [app.invoke({"x": 2}), app.invoke({"x": 2}), app.invoke({"x": 3})] == [
        {"x": 2, "y": 4},
        {"x": 2, "y": 4},
        {"x": 3, "y": 6},
    ]
    assert CACHED_CALLS == [2, 3]


def test_issue46_the_layer_never_imports_langgraph_nor_the_core_the_layer() -> None:
    code = (
        "import sys\n"
        "import stargraph, stargraph.graph, stargraph.runtime\n"
        "core = 'stargraph.langgraph' in sys.modules\n"
        "import stargraph.langgraph\n"
        "print(core, any(m == 'langgraph' or m.startswith('langgraph.') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


async def shout(ticket: Ticket) -> dict[str, Any]:
    return {"log": [ticket["text"].upper()]}


def test_issue46_an_async_node_runs_under_ainvoke_and_astream() -> None:
    builder = StateGraph(Ticket)
    builder.add_node(shout)
    builder.add_edge(START, "shout")
    app = builder.compile()

    async def both() -> tuple[dict[str, Any], list[Any]]:
        final = await app.ainvoke({"text": "hey"})
        updates = [item async for item in app.astream({"text": "ho"}, stream_mode="updates")]
        return final, updates

    final, updates = asyncio.run(both())
    assert final == {"text": "hey", "log": ["HEY"]}
    assert updates == [{"shout": {"log": ["HO"]}}]
