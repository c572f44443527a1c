"""A SkillSpec machine runs the same with every checkpoint store as without one.

A graph with a store hands its nodes the journaled model and arbiter (they record each call
so that resume and replay are served from the record); the machine's steps must take those
as they take the plain ones. Every cell runs the small spec (a tool call, a transition, a
``finish``) against the scripted OpenAI-compatible server and compares the final state with
the storeless run's.
"""

# Fixtures are imported from test_machine_helpers (no conftest here) and then requested as
# arguments, which pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, JsonValue

import stargraph
from stargraph import reducers
from stargraph.checkpoint import CheckpointStore, MemoryStore, Recording, SqliteStore
from stargraph.errors import LLMError, NodeError
from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from stargraph.nodes import SubgraphNode
from stargraph.skills.machine import (
    MachineEvent,
    MachineRuntime,
    compile_skillspec,
    skillspec_graph,
    transition_records,
)
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolCall, ToolResult
from tests.skills.machine.test_machine_helpers import (  # noqa: F401 -- fixtures
    MEMORY_FN,
    QUERIES,
    _reset,
    arbiter,
    call,
    chat,
    finish,
    registry,
    server,
    small_spec,
)

SCRIPT = [call(MEMORY_FN, {"query": "the answer"}), call("complete"), finish(answer="42")]
"""work: ask the memory tool, then ``complete``; done: ``finish`` with the answer."""

PATH = [("work", "complete", "done")]


def _final(app: Any, run_id: str = "run-1") -> dict[str, Any]:
    state = app.invoke({"input": {"topic": "x"}}, run_id=run_id)
    return dict(state.model_dump(mode="json"))


def _storeless(server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter) -> Any:
    server.set_script(SCRIPT)
    app = skillspec_graph(small_spec()).compile(services={"model": chat, "arbiter": arbiter})
    final = _final(app)
    assert (final["status"], final["state"], final["output"]) == ("done", "done", {"answer": "42"})
    server.requests.clear()
    QUERIES.clear()
    return final


def _store(kind: str, tmp_path: Path) -> CheckpointStore:
    return MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "runs.db")


def _path(transitions: Any) -> list[tuple[str, str, str]]:
    return [(t["from"], t["on"], t["to"]) for t in transitions]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_issue44_machine_runs_with_a_store_as_without(
    kind: str,
    tmp_path: Path,
    server: ScriptedOpenAIServer,
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    expected = _storeless(server, chat, arbiter)
    server.set_script(SCRIPT)
    store = _store(kind, tmp_path)
    app = skillspec_graph(small_spec()).compile(
        services={"model": chat, "arbiter": arbiter}, store=store
    )
    assert _final(app) == expected
    assert len(server.chat_requests) == 3
    assert QUERIES == ["the answer"]
    assert app.get_run("run-1").status == "done"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_issue44_machine_runtime_with_a_store(
    kind: str,
    tmp_path: Path,
    server: ScriptedOpenAIServer,
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    def run(store: CheckpointStore | None) -> tuple[Any, ...]:
        server.set_script(SCRIPT)
        runtime = MachineRuntime(
            model=chat, arbiter=arbiter, skills=[small_spec()], session="s", store=store
        )
        result = runtime.run("small", {"topic": "x"})
        return (result.status, result.reason, result.state, result.output, result.llm_steps,
                _path(result.transitions), result.events)  # fmt: skip

    expected = run(None)
    assert expected[:5] == ("done", "done", "done", {"answer": "42"}, 3)
    assert run(_store(kind, tmp_path)) == expected


class Parent(BaseModel):
    """A parent graph's state that takes the mounted machine's output fields."""

    input: dict[str, JsonValue] = {}
    status: str = ""
    reason: str | None = None
    state: str = ""
    output: dict[str, JsonValue] | None = None
    llm_steps: int = 0
    transitions: Annotated[list[dict[str, JsonValue]], reducers.append] = []
    events: Annotated[list[MachineEvent], reducers.append] = []
    after: str = ""


def _report(state: Parent) -> dict[str, Any]:
    return {"after": f"skill ended {state.status}"}


def _parent() -> Graph[Parent]:
    spec = small_spec()
    return (
        Graph("parent", state=Parent)
        .with_node(
            SubgraphNode.from_skill(
                compile_skillspec(spec), site="skill", max_steps=spec.max_steps + 2
            )
        )
        .with_node("report", _report)
        .with_edge(START, "skill")
        .with_edge("skill", "report")
        .with_edge("report", END)
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_issue44_machine_mounted_as_subgraph_in_a_graph_with_a_store(
    kind: str,
    tmp_path: Path,
    server: ScriptedOpenAIServer,
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    services = {"model": chat, "arbiter": arbiter}
    server.set_script(SCRIPT)
    expected = _final(_parent().compile(services=services))
    assert (expected["status"], expected["after"]) == ("done", "skill ended done")
    server.set_script(SCRIPT)
    durable = _parent().compile(services=services, store=_store(kind, tmp_path))
    assert _final(durable) == expected


def test_issue44_machine_resumes_after_a_failed_step(
    tmp_path: Path, server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    expected = _storeless(server, chat, arbiter)
    # The second model call fails (a 500 with no retries): the run stops after one step.
    server.set_script([SCRIPT[0], Reply.error(500, "upstream down")])
    store = SqliteStore(tmp_path / "runs.db")
    app = skillspec_graph(small_spec()).compile(
        services={"model": chat, "arbiter": arbiter}, store=store
    )
    with pytest.raises(LLMError):
        _final(app)
    assert app.get_run("run-1").status != "done"
    assert QUERIES == ["the answer"]
    # A new process: a fresh store handle and graph over the same file.
    server.set_script(SCRIPT[1:])
    again = skillspec_graph(small_spec()).compile(
        services={"model": chat, "arbiter": arbiter}, store=SqliteStore(tmp_path / "runs.db")
    )
    final = again.resume("run-1")
    assert final.model_dump(mode="json") == expected
    # The committed first step (model call and tool call) was not run again.
    assert QUERIES == ["the answer"]
    assert len(server.chat_requests) == 2 + 2
    assert again.get_run("run-1").status == "done"


ROOT = Path(__file__).resolve().parents[3]
CHILD = "from tests.skills.machine.test_issue44_machine_with_stores import child; child()"


def child() -> None:
    """A process that runs the small spec on ``argv[1]`` (a SQLite file) against the
    scripted server at ``argv[2]``, dying (``tests.crashgraph``, ``SG_CRASH_AT``) where told."""
    from tests.crashgraph import CrashingStore

    db, base_url, workspace = sys.argv[1:4]
    model = OpenAIChatModel(
        "gpt-test", base_url=base_url, api_key="sk-test", timeout=5.0, max_retries=0
    )
    with Arbiter(registry(), workspace=Path(workspace)) as arbiter:
        app = skillspec_graph(small_spec()).compile(
            services={"model": model, "arbiter": arbiter}, store=CrashingStore(db)
        )
        _final(app)


def test_issue44_machine_killed_after_a_commit_resumes_to_the_same_state(
    tmp_path: Path, server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    expected = _storeless(server, chat, arbiter)
    server.set_script(SCRIPT)
    workspace = tmp_path / "child-ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SG_CRASH_AT"}
    # The child imports the stargraph this process runs, and tests.crashgraph from ROOT.
    src = Path(stargraph.__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT), env.get("PYTHONPATH", "")])
    env["SG_CRASH_AT"] = "after_commit:1"
    crashed = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "runs.db"), server.base_url, str(workspace)],
        check=False,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert crashed.returncode == 137, crashed.stderr
    assert len(server.chat_requests) == 1  # the process died after its first step
    app = skillspec_graph(small_spec()).compile(
        services={"model": chat, "arbiter": arbiter}, store=SqliteStore(tmp_path / "runs.db")
    )
    final = app.resume("run-1")
    assert final.model_dump(mode="json") == expected
    # The killed process's step (its model call and tool call) was not made again.
    assert len(server.chat_requests) == 1 + 2
    assert QUERIES == []


def test_issue44_machine_replays_offline_from_the_record(
    tmp_path: Path, server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    expected = _storeless(server, chat, arbiter)
    server.set_script(SCRIPT)
    store = SqliteStore(tmp_path / "runs.db")
    app = skillspec_graph(small_spec()).compile(
        services={"model": chat, "arbiter": arbiter}, store=store
    )
    assert _final(app) == expected
    server.requests.clear()
    QUERIES.clear()
    # The server has no script left: a model call in the replay would fail the test.
    server.set_script([])
    replayed = app.replay("run-1")
    assert replayed.model_dump(mode="json") == expected
    assert server.chat_requests == []
    assert QUERIES == []


class _Dispatcher:
    """An arbiter stand-in that is not an :class:`Arbiter`: it forwards to one."""

    def __init__(self, arbiter: Arbiter) -> None:
        self.inner = arbiter
        self.registry = arbiter.registry
        self.commit_log = arbiter.commit_log
        self.artifacts = arbiter.artifacts
        self.calls: list[str] = []

    def dispatch(self, call: ToolCall, /) -> ToolResult:
        self.calls.append(call.tool)
        return self.inner.dispatch(call)

    async def adispatch(self, call: ToolCall, /) -> ToolResult:
        return self.dispatch(call)


def test_issue44_machine_takes_any_dispatcher_as_its_arbiter(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    expected = _storeless(server, chat, arbiter)
    server.set_script(SCRIPT)
    dispatcher = _Dispatcher(arbiter)
    app = skillspec_graph(small_spec()).compile(services={"model": chat, "arbiter": dispatcher})
    assert _final(app) == expected
    assert dispatcher.calls == [MEMORY_FN]
    # The storeless run committed its transition to the same log first.
    assert _path(transition_records(dispatcher)) == PATH * 2


def test_issue44_machine_without_an_arbiter_names_node_key_and_fix(
    tmp_path: Path, chat: OpenAIChatModel
) -> None:
    app = skillspec_graph(small_spec()).compile(
        services={"model": chat, "arbiter": object()}, store=SqliteStore(tmp_path / "runs.db")
    )
    with pytest.raises(NodeError) as caught:
        _final(app)
    message = str(caught.value)
    assert "skill node 'work' needs a tool Arbiter as services['arbiter'] but got object" in message
    assert "compile the graph with services={'arbiter': ...}" in message


def test_issue44_machine_records_each_model_and_tool_call_once(
    tmp_path: Path, server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    server.set_script(SCRIPT)
    store = SqliteStore(tmp_path / "runs.db")
    app = skillspec_graph(small_spec()).compile(
        services={"model": chat, "arbiter": arbiter}, store=store
    )
    _final(app)
    recording = Recording.from_store(store, "run-1")
    calls = [(s.step, c.kind) for s in recording.steps for c in s.calls]
    # The journaled model and arbiter record their calls (with the request, which replay
    # compares); only the transition commit, which neither makes, goes through ctx.once.
    assert calls == [(1, "llm"), (1, "tool"), (2, "llm"), (2, "once"), (3, "llm")]
