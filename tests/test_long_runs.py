"""Long runs store linearly: twice the steps with the same per-step payload store about twice
the bytes (in the SQLite file and in a cassette), not four times.

A ReAct agent's transcript grows every step, so a record that keeps each model request whole,
or a snapshot that copies the whole conversation, grows with the square of the run's length.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import Recording, SqliteStore
from stargraph.graph import END, START, Graph
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.replay import export_cassette, load_cassette
from stargraph.skills.react import react_graph
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool

ECHO = "longrun.echo@1.0.0"
ECHO_NAME = llm_name_for(ECHO)
PAYLOAD = 200  # bytes of each tool result


@tool(id=ECHO)
def echo(i: int) -> str:
    """Return a 200-character observation for call ``i``."""
    return f"observation {i:05d} " + "x" * (PAYLOAD - 18)


def _script(calls: int) -> Any:
    def answer(request: ChatRequest) -> ChatResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        if done >= calls:
            return ChatResponse(message=ChatMessage.assistant("finished"), finish_reason="stop")
        call = ToolCall(id=f"call_{done}", name=ECHO_NAME, arguments=f'{{"i": {done}}}')
        return ChatResponse(
            message=ChatMessage.assistant(tool_calls=[call]), finish_reason="tool_calls"
        )

    return answer


def row_bytes(path: Path) -> int:
    """The bytes of every stored row of the file (payloads of steps, runs' extra)."""
    with sqlite3.connect(path) as conn:
        (steps,) = conn.execute("SELECT SUM(LENGTH(payload)) FROM steps").fetchone()
    return int(steps)


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    arbiter = Arbiter(ToolRegistry.build(builtins=[echo]), workspace=str(tmp_path / "ws"))
    yield arbiter
    arbiter.close()


def react_run(tmp_path: Path, arbiter: Arbiter, calls: int) -> tuple[Path, int, int]:
    """A durable ReAct run making ``calls`` tool calls; the file, its row bytes and the bytes
    of the run's cassette."""
    path = tmp_path / f"react-{calls}.db"
    model = ScriptedChatModel(_script(calls))
    with SqliteStore(path) as store:
        app = react_graph(tools=[ECHO], max_steps=calls + 5).compile(
            store=store, services={"model": model, "arbiter": arbiter}, max_steps=10 * calls
        )
        final = app.invoke({"task": "observe"}, run_id=f"r{calls}")
        assert final.final_answer == "finished"
        assert len(final.tool_calls) == calls
        cassette = export_cassette(store, f"r{calls}", tmp_path / f"react-{calls}.json")
    return path, row_bytes(path), cassette.stat().st_size


class Log(BaseModel):
    items: Annotated[list[str], reducers.append] = []
    n: int = 0
    limit: int = 0


def grow(state: Log) -> dict[str, Any]:
    return {"items": [f"{state.n:06d}" + "y" * 94], "n": state.n + 1}


def again(state: Log) -> str:
    return "grow" if state.n < state.limit else END


def loop_run(tmp_path: Path, steps: int) -> int:
    path = tmp_path / f"loop-{steps}.db"
    graph = (
        Graph("growing-loop", state=Log)
        .with_node("grow", grow)
        .with_edge(START, "grow")
        .with_conditional_edges("grow", again, ["grow", END])
    )
    with SqliteStore(path) as store:
        app = graph.compile(store=store, max_steps=steps + 10)
        final = app.invoke({"limit": steps}, run_id="loop")
        assert len(final.items) == steps
        assert app.get_state("loop", steps // 2 + 7).n == steps // 2 + 7
    return row_bytes(path)


def test_issue19_react_run_stores_linearly(tmp_path: Path, arbiter: Arbiter) -> None:
    _, small, small_cassette = react_run(tmp_path, arbiter, 100)
    _, large, large_cassette = react_run(tmp_path, arbiter, 200)
    assert large < 2.5 * small, (small, large)
    assert large_cassette < 2.5 * small_cassette, (small_cassette, large_cassette)


def test_issue19_append_channel_self_loop_stores_linearly(tmp_path: Path) -> None:
    small = loop_run(tmp_path, 200)
    large = loop_run(tmp_path, 400)
    assert large < 2.5 * small, (small, large)


def test_issue19_requests_come_back_whole(tmp_path: Path, arbiter: Arbiter) -> None:
    """Stored as deltas, the requests read back (recording, cassette) are the ones the model
    was asked, and each one's fingerprint is the hash of the whole request."""
    model = ScriptedChatModel(_script(6))
    with SqliteStore(tmp_path / "r.db") as store:
        app = react_graph(tools=[ECHO], max_steps=10).compile(
            store=store, services={"model": model, "arbiter": arbiter}
        )
        app.invoke({"task": "observe"}, run_id="r")
        stored = [c for s in store.get_steps("r") for c in s.calls if c.kind == "llm"]
        recording = Recording.from_store(store, "r")
        cassette = load_cassette(export_cassette(store, "r", tmp_path / "r.json"))
    asked = [r.model_dump(mode="json", exclude_defaults=True) for r in model.requests]
    assert len(asked) == 7
    # Stored: the first request whole, every later one as the messages it adds.
    assert [bool(c.base) for c in stored] == [False] + [True] * 6
    assert all(set(c.request) <= {"append", "set", "unset"} for c in stored[1:])
    for source in (recording, cassette):
        llm = [c for s in source.steps for c in s.calls if c.kind == "llm"]
        assert [c.request for c in llm] == asked
        assert [c.fingerprint for c in llm] == [c.fingerprint for c in stored]
        assert [c.base for c in llm] == [""] * 7
    assert [c.fingerprint for c in stored] == [
        ChatRequest.model_validate(r).fingerprint() for r in asked
    ]
