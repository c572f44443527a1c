"""Replay (invariant 6): recorded runs replay offline, byte for byte; divergence is caught."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from stargraph import fathom, reducers
from stargraph.checkpoint import MemoryStore, Recording, SqliteStore
from stargraph.errors import (
    CassetteError,
    GraphHashMismatch,
    NodeError,
    ReplayDivergenceError,
    ReplayMissError,
)
from stargraph.graph import END, START, Graph
from stargraph.llm import ChatMessage, ChatRequest, OpenAIChatModel, ScriptedChatModel
from stargraph.replay import diff, export_cassette, load_cassette
from stargraph.runtime import RunContext, RunFinished
from stargraph.skills.react import react_graph
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, Workspace, tool

SWITCHES = {"bodies_raise": False}


class S(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0
    note: str = ""


def stamp(state: S, ctx: RunContext) -> dict[str, Any]:
    return {
        "log": [f"{ctx.node}:{ctx.uuid()[:8]}:{ctx.random():.5f}"],
        "note": ctx.now().isoformat(),
    }


def ask_llm(state: S, ctx: RunContext) -> dict[str, Any]:
    model = ctx.services["model"]
    prompt = ctx.config.get("prompt", "hi")
    reply = model.complete(ChatRequest(messages=(ChatMessage.user(f"{prompt} {state.total}"),)))
    return {"log": [f"llm:{reply.message.content}"], "total": 1}


def timed_branch(state: S, ctx: RunContext) -> dict[str, Any]:
    import time

    time.sleep(random.random() * 0.002)
    return {"log": [ctx.node], "total": int(ctx.node[1:])}


def llm_graph(prompt: str = "hi", calls: int = 2) -> Graph[S]:
    graph = Graph("llm", state=S).with_node("s", stamp)
    names = [f"q{i}" for i in range(calls)]
    for name in names:
        graph = graph.with_node(name, ask_llm, config={"prompt": prompt})
    chain = ["s", *names]
    graph = graph.with_edge(START, "s")
    for a, b in itertools.pairwise(chain):
        graph = graph.with_edge(a, b)
    return graph.with_edge(chain[-1], END)


def fan_graph() -> Graph[S]:
    names = [f"b{i:02d}" for i in range(8)]
    graph = Graph("fan", state=S).with_node("s", stamp).with_edge(START, "s")
    for name in names:
        graph = graph.with_node(name, timed_branch, blocking=True).with_edge("s", name)
    return graph.with_node("j", stamp).with_edge(names, "j").with_edge("j", END)


def _scripted(n: int) -> ScriptedChatModel:
    return ScriptedChatModel([f"answer {i}" for i in range(n)])


def test_replay_reproduces_state_and_events_without_calling_the_model(
    store: SqliteStore,
) -> None:
    live = llm_graph().compile(store=store, services={"model": _scripted(2)})
    events = list(live.stream({}, run_id="r"))
    # Replay with a model that would fail if called: every response comes from the record.
    offline = llm_graph().compile(store=store, services={"model": ScriptedChatModel([])})
    replayed = list(offline.replay_stream("r"))
    assert [e.model_dump() for e in replayed] == [e.model_dump() for e in events]
    assert offline.replay("r") == live.get_state("r")
    calls = [c.kind for step in live.history("r") for c in step.calls]
    assert calls == ["uuid", "random", "now", "llm", "llm"]


def test_replay_needs_no_model_service(store: SqliteStore) -> None:
    """A replay compiled without the model a node asks for (offline, in CI): its calls
    are answered by the record; it used to fail with ``KeyError: 'model'``."""
    live = llm_graph().compile(store=store, services={"model": _scripted(2)})
    live.invoke({}, run_id="r")
    offline = llm_graph().compile(store=store)
    assert offline.replay("r") == live.get_state("r")


class Lookup(BaseModel):
    found: str = ""


def look_up(state: Lookup, ctx: RunContext) -> dict[str, Any]:
    return {"found": ctx.services["db"].query("x")}


def test_a_replay_missing_a_non_model_service_names_it(store: SqliteStore) -> None:
    """Only model calls are in the record: a replay that reaches another service it was not
    given fails with a typed error naming the service and the fix (not a ``KeyError``)."""

    class Db:
        def query(self, key: str) -> str:
            return key.upper()

    graph = Graph("lookup", state=Lookup).with_node("look_up", look_up)
    graph = graph.with_edge(START, "look_up").with_edge("look_up", END)
    live = graph.compile(store=store, services={"db": Db()})
    assert live.invoke({}, run_id="l").found == "X"
    offline = graph.compile(store=store)
    with pytest.raises(ReplayMissError) as caught:
        offline.replay("l")
    message = str(caught.value)
    assert "services['db'].query" in message
    assert "compile the replaying graph with services={'db': ...}" in message
    assert graph.compile(store=store, services={"db": Db()}).replay("l").found == "X"


def test_prompt_change_raises_divergence_with_a_diff(store: SqliteStore) -> None:
    llm_graph("hi").compile(store=store, services={"model": _scripted(2)}).invoke({}, run_id="r")
    changed = llm_graph("hello").compile(store=store, services={"model": _scripted(0)})
    # A prompt change is a config change: the graph hash differs and replay refuses first.
    with pytest.raises(GraphHashMismatch):
        changed.replay("r")
    recording = Recording.from_store(store, "r")
    forged = recording.model_copy(
        update={"run": recording.run.model_copy(update={"graph_hash": changed.graph_hash})}
    )
    with pytest.raises(ReplayDivergenceError) as info:
        changed.replay(forged)
    message = str(info.value)
    assert "node 'q0' at step 2, call #0: made llm('chat')" in message
    assert '-   "content": "hi 0",' in message
    assert '+   "content": "hello 0",' in message
    assert info.value.call_index == 0
    assert info.value.recorded_fingerprint != info.value.fingerprint


def test_more_calls_than_recorded_is_a_miss(store: SqliteStore) -> None:
    llm_graph(calls=1).compile(store=store, services={"model": _scripted(1)}).invoke({}, run_id="r")
    recording = Recording.from_store(store, "r")
    last = recording.steps[-1]
    trimmed = recording.model_copy(
        update={"steps": (*recording.steps[:-1], last.model_copy(update={"calls": ()}))}
    )
    with pytest.raises(ReplayMissError, match="call #0 llm\\('chat'\\) has no recorded stub"):
        llm_graph(calls=1).compile(services={"model": _scripted(0)}).replay(trimmed)


def test_parallel_branches_replay_cleanly_50_times(store: SqliteStore) -> None:
    app = fan_graph().compile(store=store)
    for i in range(50):
        app.invoke({}, run_id=f"r{i}")
        assert app.replay(f"r{i}") == app.get_state(f"r{i}")
    assert {len(app.history(f"r{i}")) for i in range(50)} == {4}
    app.close()


def test_cassette_round_trip_and_bad_cassettes(store: SqliteStore, tmp_path: Path) -> None:
    app = llm_graph().compile(store=store, services={"model": _scripted(2)})
    app.invoke({}, run_id="r")
    path = export_cassette(store, "r", tmp_path / "golden" / "r.json")
    recording = load_cassette(path, graph_hash=app.graph_hash)
    fresh = llm_graph().compile(services={"model": ScriptedChatModel([])})
    assert fresh.replay(recording) == app.get_state("r")
    # another graph
    with pytest.raises(CassetteError, match="was recorded by graph"):
        load_cassette(path, graph_hash="sha256:" + "0" * 64)
    # truncated
    (tmp_path / "cut.json").write_bytes(path.read_bytes()[:200])
    with pytest.raises(CassetteError, match="not valid JSON"):
        load_cassette(tmp_path / "cut.json")
    # edited by hand
    data = json.loads(path.read_text())
    data["recording"]["steps"][1]["writes"][0]["writes"]["log"] = ["forged"]
    (tmp_path / "edited.json").write_text(json.dumps(data))
    with pytest.raises(CassetteError, match="edited by hand"):
        load_cassette(tmp_path / "edited.json")


def test_counterfactual_diff_starts_at_the_mutated_step(store: SqliteStore) -> None:
    app = llm_graph(calls=3).compile(store=store, services={"model": _scripted(10)})
    app.invoke({}, run_id="r")
    app.replay("r", from_step=3, mutate={"total": 100}, new_run_id="cf")
    assert (app.get_run("cf").parent_run_id, app.get_run("cf").parent_step) == ("r", 2)
    result = diff(Recording.from_store(store, "r"), Recording.from_store(store, "cf"))
    assert result.first_step == 3
    # The override goes through the reducers (total is summed): 1 + 100, then two LLM steps.
    assert app.get_state("cf").total == 1 + 100 + 2
    assert app.get_state("cf", 2) == app.get_state("r", 2)  # steps before 3 from the record
    same = diff(Recording.from_store(store, "r"), Recording.from_store(store, "r"))
    assert same.identical


def test_resume_after_a_crash_never_repeats_a_recorded_llm_call(store: SqliteStore) -> None:
    model = _scripted(3)

    class Boom(Exception):
        pass

    original = ask_llm

    calls = {"n": 0}

    def flaky(state: S, ctx: RunContext) -> dict[str, Any]:
        out = original(state, ctx)
        calls["n"] += 1
        if calls["n"] == 1:
            raise Boom("crash after the model answered")
        return out

    graph = (
        Graph("llm", state=S)
        .with_node("s", stamp)
        .with_node("q0", ask_llm, config={"prompt": "hi"})
        .with_node("q1", flaky, ref="tests.flaky", config={"prompt": "hi"})
        .with_edge(START, "s")
        .with_edge("s", "q0")
        .with_edge("q0", "q1")
        .with_edge("q1", END)
    )
    durable = graph.compile(store=store, services={"model": model})
    with pytest.raises(NodeError):
        durable.invoke({}, run_id="c")
    assert len(model.requests) == 2
    final = durable.resume("c")
    assert len(model.requests) == 2  # q1's answer came from the record
    assert final.log[-1] == "llm:answer 1"


# --------------------------------------------------------------------- ReAct end to end


@tool(id="demo.add@1.0.0", side_effect="none")
def add(a: int, b: int) -> int:
    """Add two integers."""
    if SWITCHES["bodies_raise"]:
        raise AssertionError("a tool body ran during replay")
    return a + b


def test_react_run_replays_byte_identical_with_the_server_stopped(
    tmp_path: Path, store: SqliteStore
) -> None:
    registry = ToolRegistry.build(builtins=[add])
    arbiter = Arbiter(registry, workspace=Workspace.at(tmp_path))
    graph = react_graph(tools=["demo.add@1.0.0"], max_steps=5)
    with ScriptedOpenAIServer(
        [
            Reply.tool_calls([("demo__add__v1_0_0", {"a": 2, "b": 3})]),
            Reply.tool_calls([("demo__add__v1_0_0", {"a": 5, "b": 5})]),
            Reply.text("The answer is 10."),
        ]
    ) as server:
        model = OpenAIChatModel("scripted-model", base_url=server.base_url, api_key="x")
        app = graph.compile(store=store, services={"model": model, "arbiter": arbiter})
        events = list(app.stream({"task": "2+3, then +5"}, run_id="react"))
        model.close()
    assert isinstance(events[-1], RunFinished)
    assert events[-1].state["final_answer"] == "The answer is 10."
    SWITCHES["bodies_raise"] = True
    try:
        dead = OpenAIChatModel("scripted-model", base_url="http://127.0.0.1:9/v1", api_key="x")
        offline = graph.compile(store=store, services={"model": dead, "arbiter": arbiter})
        replayed = list(offline.replay_stream("react"))
        dead.close()
    finally:
        SWITCHES["bodies_raise"] = False
    assert [e.model_dump_json() for e in replayed] == [e.model_dump_json() for e in events]


# --------------------------------------------------------------------- property tests


class P(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


CRASH = {"at": -1, "seen": 0}


def pnode(state: P, ctx: RunContext) -> dict[str, Any]:
    CRASH["seen"] += 1
    if CRASH["seen"] == CRASH["at"]:
        raise RuntimeError("killed")
    return {"log": [f"{ctx.node}:{ctx.random():.4f}"], "total": len(state.log)}


@st.composite
def dags(draw: st.DrawFn) -> Graph[P]:
    n = draw(st.integers(2, 6))
    names = [f"n{i}" for i in range(n)]
    graph = Graph("rnd", state=P)
    for name in names:
        graph = graph.with_node(name, pnode)
    graph = graph.with_edge(START, names[0])
    has_child: set[int] = set()
    for i in range(1, n):
        parents = draw(st.sets(st.integers(0, i - 1), min_size=1, max_size=2))
        has_child |= parents
        graph = graph.with_edge([names[j] for j in sorted(parents)], names[i])
    for i in range(n):
        if i not in has_child:
            graph = graph.with_edge(names[i], END)
    return graph


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=dags(), kill=st.integers(1, 8), seed=st.integers(0, 1000))
def test_replay_of_record_and_resume_of_kill_equal_the_run(
    graph: Graph[P], kill: int, seed: int
) -> None:
    from stargraph.runtime import SeededEntropy

    # Same run id in two stores: seeded draws are keyed by position, run id included.
    app = graph.compile(store=MemoryStore(), entropy=lambda: SeededEntropy(seed))
    CRASH.update(at=-1, seen=0)
    reference = app.invoke({}, run_id="r")
    assert app.replay("r") == reference
    other = graph.compile(store=MemoryStore(), entropy=lambda: SeededEntropy(seed))
    CRASH.update(at=kill, seen=0)
    try:
        final = other.invoke({}, run_id="r")
    except NodeError:
        CRASH.update(at=-1)
        final = other.resume("r")
    assert final == reference


def test_async_replay_matches() -> None:
    store = MemoryStore()
    app = llm_graph().compile(store=store, services={"model": _scripted(2)})

    async def go() -> S:
        return await app.ainvoke({}, run_id="a")

    live = asyncio.run(go())
    assert app.replay("a") == live


def test_rule_routed_run_replays(store: SqliteStore) -> None:
    from tests.runtime.test_rules_runtime import GOTO_WORK, _looping

    graph = _looping(GOTO_WORK, fathom.default_termination_pack(max_steps=6, error_budget=3))
    app = graph.compile(store=store)
    live = list(app.stream({}, run_id="rr"))
    assert [e.model_dump() for e in app.replay_stream("rr")] == [e.model_dump() for e in live]


def _forge(document: dict[str, Any]) -> dict[str, Any]:
    """Edit the model's first answer consistently - in its recorded call and in the write
    made from it - and recompute the plain checksum, as a forger would."""
    from stargraph.ir import content_hash

    forged: dict[str, Any] = json.loads(json.dumps(document))
    for step in forged["recording"]["steps"]:
        for call in step.get("calls", []):
            if call["kind"] == "llm" and "answer 0" in json.dumps(call["value"]):
                call["value"] = json.loads(json.dumps(call["value"]).replace("answer 0", "FORGED"))
                for write in step["writes"]:
                    write["writes"]["log"] = ["llm:FORGED"]
    forged["checksum"] = content_hash(forged["recording"])
    return forged


def test_signed_cassette_refuses_a_consistent_forgery(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 item 13: a checksum is recomputable, so only a keyed signature stops a
    forged cassette (values edited consistently, checksum recomputed)."""
    monkeypatch.delenv("STARGRAPH_CASSETTE_KEY", raising=False)
    app = llm_graph().compile(store=store, services={"model": _scripted(2)})
    app.invoke({}, run_id="r")
    key = b"0123456789abcdef0123456789abcdef"
    path = export_cassette(store, "r", tmp_path / "signed.json", key=key)
    fresh = llm_graph().compile(services={"model": ScriptedChatModel([])})
    assert fresh.replay(load_cassette(path, key=key)) == app.get_state("r")

    document = json.loads(path.read_text())
    assert document["signature"].startswith("hmac-sha256:")
    forged = _forge(document)
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    # What the checksum alone cannot tell: unsigned, the forgery loads and replays.
    unsigned = {k: v for k, v in forged.items() if k != "signature"}
    (tmp_path / "unsigned.json").write_text(json.dumps(unsigned))
    assert "llm:FORGED" in fresh.replay(load_cassette(tmp_path / "unsigned.json")).log
    # With the key, every way round it is refused.
    with pytest.raises(CassetteError, match="does not match its signature"):
        load_cassette(tmp_path / "forged.json", key=key)
    with pytest.raises(CassetteError, match="does not match its signature"):
        load_cassette(path, key=b"another key, not the signer's")
    with pytest.raises(CassetteError, match="is not signed"):
        load_cassette(tmp_path / "unsigned.json", key=key)
    with pytest.raises(CassetteError, match="is signed; load it with its key"):
        load_cassette(path)
    # The key may come from the environment instead (the CLI's way).
    monkeypatch.setenv("STARGRAPH_CASSETTE_KEY", key.decode())
    assert load_cassette(path).run.run_id == "r"
    with pytest.raises(CassetteError, match="does not match its signature"):
        load_cassette(tmp_path / "forged.json")
    env_signed = export_cassette(store, "r", tmp_path / "env.json")
    assert json.loads(env_signed.read_text())["signature"] == document["signature"]
