"""Long runs store linearly: twice the steps with the same per-step payload store about twice
the bytes (in the SQLite file and in a cassette), not four times.

A ReAct agent's transcript grows every step, so a record that keeps each model request whole,
or a snapshot that copies the whole conversation, grows with the square of the run's length.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import Recording, SqliteStore
from stargraph.checkpoint._codec import PACKED, unpack
from stargraph.errors import NodeError
from stargraph.graph import END, START, Graph
from stargraph.ir import content_hash
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.llm._recorded import encode_request
from stargraph.replay import export_cassette, load_cassette
from stargraph.runtime import RunContext
from stargraph.runtime._context import Conversation
from stargraph.skills.react import react_graph
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool

ECHO = "longrun.echo@1.0.0"
ECHO_NAME = llm_name_for(ECHO)
PAYLOAD = 200  # bytes of each tool result


@tool(id=ECHO)
def echo(i: int) -> str:
    """Return a 200-character observation for call ``i``."""
    return f"observation {i:05d} " + "x" * (PAYLOAD - 18)


def _script(calls: int) -> Callable[[ChatRequest], ChatResponse]:
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


def _calls_holding(path: Path, text: str) -> list[str]:
    """The kind of every recorded call, in the stored step rows of ``path``, whose stored
    JSON holds ``text``."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT payload FROM steps ORDER BY step").fetchall()
    found = []
    for (payload,) in rows:
        raw = bytes(payload)
        step = json.loads(unpack(raw) if raw[:1] in PACKED else raw)
        found += [c["kind"] for c in step.get("calls", ()) if text in json.dumps(c)]
    return found


def test_issue19_tool_results_are_stored_once(tmp_path: Path, arbiter: Arbiter) -> None:
    """A tool result is stored with its recorded tool call only: the next model request's
    tool message refers to that call instead of repeating the result (a refused call's
    message too), and the requests read back whole are the ones the model was asked."""
    plain = _script(4)

    def answer(request: ChatRequest) -> ChatResponse:
        if sum(1 for m in request.messages if m.role == "tool") == 2:  # one refused call
            bad = ToolCall(id="call_bad", name=ECHO_NAME, arguments='{"i": "two"}')
            return ChatResponse(
                message=ChatMessage.assistant(tool_calls=[bad]), finish_reason="tool_calls"
            )
        return plain(request)

    model = ScriptedChatModel(answer)
    path = tmp_path / "once.db"
    with SqliteStore(path) as store:
        app = react_graph(tools=[ECHO], max_steps=10).compile(
            store=store, services={"model": model, "arbiter": arbiter}
        )
        final = app.invoke({"task": "observe"}, run_id="once")
        assert [c.status for c in final.tool_calls] == ["success", "success", "invalid", "success"]
        recording = Recording.from_store(store, "once")
        cassette = load_cassette(export_cassette(store, "once", tmp_path / "once.json"))
    assert _calls_holding(path, "observation 00001 ") == ["tool"]
    assert _calls_holding(path, "observation 00003 ") == ["tool"]
    assert _calls_holding(path, "got invalid arguments: i: Input should be") == ["tool"]
    assert _calls_holding(path, "content_of") == ["llm"] * 4  # every request after a result
    asked = [r.model_dump(mode="json", exclude_defaults=True) for r in model.requests]
    for source in (recording, cassette):
        llm = [c for s in source.steps for c in s.calls if c.kind == "llm"]
        assert [c.request for c in llm] == asked


def test_issue19_incremental_request_fingerprints_equal_the_whole_hash() -> None:
    """The recorded body and fingerprint of each request of a conversation, computed from the
    previous request's, are those of the whole request, whatever changed in between."""
    rnd = random.Random(19)
    texts = ["hi", "héllo ✓", 'a"b\\c\n', "1.5", "", "x" * 300, "\u2028", "😀"]
    tool = {"type": "function", "function": {"name": "f", "parameters": {"x": 1.25}}}
    for _ in range(150):
        conversation = Conversation()
        messages = [ChatMessage.system(rnd.choice(texts))]
        head: dict[str, Any] = {
            "temperature": rnd.choice([None, 0.5, 1e-7]),
            "model": rnd.choice([None, "m"]),
            "extra": rnd.choice([{}, {"seed": 3, "top_p": 0.25, "é": [1.5, "z"]}]),
            "max_tokens": rnd.choice([None, 5]),
            "tools": rnd.choice([(), (tool,)]),
        }
        for turn in range(rnd.randint(1, 10)):
            pick = rnd.random()
            if pick < 0.4:
                messages.append(ChatMessage.user(rnd.choice(texts)))
            elif pick < 0.7:
                call = ToolCall(id=f"c{turn}", name="f", arguments='{"a": 1.5}')
                messages.append(ChatMessage.assistant(tool_calls=[call]))
            elif pick < 0.8 and len(messages) > 2:
                messages[1] = ChatMessage.user("edited " + rnd.choice(texts))
            elif pick < 0.9:
                assert messages[0].content is not None
                messages[0] = ChatMessage.system(messages[0].content)  # equal, not the same
            else:
                head["temperature"] = rnd.choice([None, 0.7])
            request = ChatRequest(
                messages=tuple(messages), **{k: v for k, v in head.items() if v is not None}
            )
            body, fingerprint = encode_request(request, conversation)
            whole = request.model_dump(mode="json", exclude_defaults=True)
            assert body == whole
            assert fingerprint == content_hash(whole) == request.fingerprint()


def test_issue45_a_conversation_whose_other_fields_change_is_encoded_whole() -> None:
    """A request of a kept conversation that offers other tools, or starts otherwise, is
    recorded as its whole dump, not as the kept request's fields with new messages."""
    tools = tuple(
        {"type": "function", "function": {"name": f"f{i}", "parameters": {"n": i}}}
        for i in range(20)
    )
    requests = []
    messages = [ChatMessage.user("start")]
    for i in range(6):
        requests.append(ChatRequest(messages=tuple(messages), tools=tools, temperature=0.5))
        messages.append(ChatMessage.assistant(f"reply {i}"))
    requests.append(ChatRequest(messages=tuple(messages), tools=tools[:3], temperature=0.5))
    requests.append(ChatRequest(messages=tuple(messages), tools=tools[:3], temperature=0.7))
    requests.append(ChatRequest(messages=tuple(messages[2:]), tools=tools[:3]))
    requests.append(ChatRequest(messages=(), tools=tools[:3]))
    conversation = Conversation()
    for request in requests:
        whole = request.model_dump(mode="json", exclude_defaults=True)
        assert encode_request(request, conversation) == (whole, content_hash(whole))


class Chat(BaseModel):
    answers: Annotated[list[str], reducers.append] = []


FAIL_ONCE = {"talk": True}


def talk(state: Chat, ctx: RunContext) -> dict[str, Any]:
    model = ctx.services["model"]
    history = [ChatMessage.user("first question")]
    first = model.complete(ChatRequest(messages=tuple(history)))
    history += [first.message, ChatMessage.user("second question")]
    second = model.complete(ChatRequest(messages=tuple(history)))
    if FAIL_ONCE.pop("talk", False):
        raise RuntimeError("crash after both model calls")
    return {"answers": [first.message.content or "", second.message.content or ""]}


def test_issue19_a_step_resumed_after_a_crash_is_served_its_delta_journal(tmp_path: Path) -> None:
    """The journal rows of a step in flight store the second request of a conversation as a
    delta; a resume rebuilds it and serves both recorded replies without asking again."""
    model = ScriptedChatModel(
        lambda request: ChatResponse(message=ChatMessage.assistant(f"a{len(request.messages)}"))
    )
    graph = Graph("talker", state=Chat).with_node("talk", talk).with_edge(START, "talk")
    with SqliteStore(tmp_path / "t.db") as store:
        app = graph.with_edge("talk", END).compile(store=store, services={"model": model})
        FAIL_ONCE["talk"] = True
        with pytest.raises(NodeError):
            app.invoke({}, run_id="t")
        rows = store.get_journal("t", 1)
        assert [bool(r.base) for r in rows] == [False, True]
        assert rows[1].request == {
            "append": [
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "second question"},
            ]
        }
        final = app.resume("t")
        assert final.answers == ["a1", "a3"]
        assert len(model.requests) == 2  # served from the journal on resume
        (step,) = Recording.from_store(store, "t").steps[1:]
        assert [c.request for c in step.calls] == [
            r.model_dump(mode="json", exclude_defaults=True) for r in model.requests
        ]


class CountingStore(SqliteStore):
    """Counts the write transactions it begins, and the runs written whole."""

    def __init__(self, path: Path) -> None:
        self.calls: dict[str, int] = {}
        super().__init__(path)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if not self._db.writing:
            self.calls["transactions"] = self.calls.get("transactions", 0) + 1
        with super()._write() as conn:
            yield conn

    def write_run(self, *args: Any, **kwargs: Any) -> None:
        self.calls["write_run"] = self.calls.get("write_run", 0) + 1
        super().write_run(*args, **kwargs)


def test_issue19_durability_exit_writes_the_run_once(tmp_path: Path) -> None:
    """A run kept in memory reaches the file in one write when it stops, and reads back like
    a run committed step by step."""
    graph = (
        Graph("growing-loop", state=Log)
        .with_node("grow", grow)
        .with_edge(START, "grow")
        .with_conditional_edges("grow", again, ["grow", END])
    )
    with CountingStore(tmp_path / "exit.db") as store, SqliteStore(tmp_path / "sync.db") as ref:
        store.calls = {}
        exit_app = graph.compile(store=store, durability="exit", max_steps=200, snapshot_every=7)
        final = exit_app.invoke({"limit": 60}, run_id="x")
        assert store.calls == {"write_run": 1, "transactions": 1}
        sync_app = graph.compile(store=ref, max_steps=200, snapshot_every=7)
        assert sync_app.invoke({"limit": 60}, run_id="x") == final
        assert store.get_run("x").status == "done"
        assert store.get_run("x").owner is None
        assert [s.model_copy(update={"created_ms": 0}) for s in store.get_steps("x")] == [
            s.model_copy(update={"created_ms": 0}) for s in ref.get_steps("x")
        ]
        for step in (0, 13, 60):
            assert exit_app.get_state("x", step) == sync_app.get_state("x", step)


class Fan(BaseModel):
    done: Annotated[list[str], reducers.append] = []


RAN: list[str] = []
BROKEN = {"right": True}


def left(state: Fan, ctx: RunContext) -> dict[str, Any]:
    RAN.append("left")
    return {"done": [f"left {ctx.uuid()}"]}


def right(state: Fan) -> dict[str, Any]:
    RAN.append("right")
    if BROKEN.pop("right", False):
        raise RuntimeError("right fails once")
    return {"done": ["right"]}


def test_issue19_an_exit_run_that_failed_keeps_its_finished_branch(tmp_path: Path) -> None:
    """A run kept in memory that fails mid-step is written whole (with the finished sibling's
    writes and journal), and its resume does not run that sibling again."""
    RAN.clear()
    BROKEN["right"] = True
    graph = (
        Graph("fan", state=Fan)
        .with_node("left", left)
        .with_node("right", right)
        .with_edge(START, "left")
        .with_edge(START, "right")
        .with_edge("left", END)
        .with_edge("right", END)
    )
    with CountingStore(tmp_path / "fan.db") as store:
        store.calls = {}
        app = graph.compile(store=store, durability="exit")
        with pytest.raises(NodeError):
            app.invoke({}, run_id="f")
        assert store.calls == {"write_run": 1, "transactions": 1}
        assert store.get_run("f").status == "failed"
        assert [p.node for p in store.get_pending("f", 1)] == ["left"]
        assert [e.kind for e in store.get_journal("f", 1)] == ["uuid"]
        final = app.resume("f")
    assert sorted(RAN) == ["left", "right", "right"]
    assert sorted(final.done)[1] == "right"
    assert final.done[0].startswith("left ")


def test_issue19_transcripts_are_read_from_the_steps_added_since() -> None:
    """``think`` reads a grown trajectory's messages from the kept ones, and a trajectory
    whose earlier steps were replaced from scratch."""
    from stargraph.skills.react import ReactStep, _transcript

    def steps(*texts: str) -> list[ReactStep]:
        return [
            ReactStep(llm_step=i, kind="observation", message=ChatMessage.user(t))
            for i, t in enumerate(texts)
        ]

    kept = Conversation()
    first = steps("a", "b", "c")
    assert _transcript(first, kept) == tuple(s.message for s in first)
    grown = [*first, *steps("d", "e")]
    assert _transcript(grown, kept) == tuple(s.message for s in grown)
    edited = [first[0], *steps("B"), *grown[2:], *steps("f")]
    assert _transcript(edited, kept) == tuple(s.message for s in edited)
    assert [m.content for m in _transcript(edited, kept)] == ["a", "B", "c", "d", "e", "f"]


def test_issue19_write_run_is_all_or_nothing(tmp_path: Path) -> None:
    """A run written whole whose id is taken writes nothing (one transaction)."""
    from stargraph.checkpoint import RunRecord, StepRecord, WriteRecord
    from stargraph.errors import CheckpointError

    def record(status: Any) -> RunRecord:
        return RunRecord(run_id="w", graph_name="g", graph_hash="h", code_hash="c", status=status)

    steps = [
        StepRecord(step=0, snapshot={"n": 0}),
        StepRecord(step=1, writes=(WriteRecord(node="a", writes={"n": 1}),)),
    ]
    with SqliteStore(tmp_path / "w.db") as store:
        store.write_run(record("done").model_copy(update={"last_step": 1}), steps)
        assert (store.get_run("w").status, store.get_run("w").last_step) == ("done", 1)
        assert store.get_steps("w") == steps
        with pytest.raises(CheckpointError, match="already exists"):
            store.write_run(record("failed"), steps)
        assert store.get_run("w").status == "done"
        store.create_run(record("running").model_copy(update={"run_id": "v"}), steps[0])
        with pytest.raises(CheckpointError, match="step 2 cannot follow"):
            store.write_run(
                record("done").model_copy(update={"run_id": "u"}),
                [steps[0], steps[0].model_copy(update={"step": 2})],
            )
        assert sorted(r.run_id for r in store.list_runs()) == ["v", "w"]
