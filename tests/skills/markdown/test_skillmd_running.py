"""SKILL.md skills run (D3): a workflow over a real Arbiter and builtin tools, the verify
node's failures, and a ``kind: agent`` file mounting ReAct against the scripted server."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph import CompiledGraph
from stargraph.checkpoint import SqliteStore
from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from stargraph.nodes import SubgraphNode
from stargraph.skills.markdown import MarkdownSkill, WorkflowOutput, parse_skill_md
from stargraph.skills.react import ReactOutput
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, builtin_tools

ARCHIVE = """\
---
name: archive-notes
description: Copy the notes into the archive and check the copy.
version: 1.0.0
tools: [choir.fs.read@1.0.0, choir.fs.write@1.0.0]
workflow:
  - {step: read the notes, tool: choir.fs.read@1.0.0, params: {path: notes.txt}}
  - step: write the archive
    tool: choir.fs.write@1.0.0
    params: {path: archive/notes.txt, content: "archived: hello"}
verification:
  - a human glances at the archive
  - {check: notes read, step: 1, contains: hello}
  - {check: archive written, tool: choir.fs.read@1.0.0, params: {path: archive/notes.txt},
     contains: "archived: hello"}
---
Archive carefully.
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("hello world\n", encoding="utf-8")
    return root


@pytest.fixture
def arbiter(workspace: Path) -> Iterator[Arbiter]:
    with Arbiter(ToolRegistry.build(builtins=builtin_tools()), workspace=workspace) as arb:
        yield arb


def run(skill: MarkdownSkill, arbiter: Arbiter, store: SqliteStore, run_id: str) -> Any:
    assert skill.subgraph is not None
    assert not isinstance(skill.subgraph, str)
    app: CompiledGraph[Any] = Graph(skill.subgraph, impls=skill.impls).compile(
        store=store, services={"arbiter": arbiter}
    )
    final = app.invoke({}, run_id=run_id)
    return final, app.get_run(run_id)


def test_D3_workflow_runs_end_to_end_with_a_real_arbiter(
    tmp_path: Path, workspace: Path, arbiter: Arbiter
) -> None:
    skill = parse_skill_md(ARCHIVE, source="archive/SKILL.md")
    assert skill.state_schema is WorkflowOutput
    assert isinstance(skill.subgraph, type(skill.subgraph))
    nodes = [n.id for n in skill.subgraph.nodes]  # type: ignore[union-attr]
    assert nodes == ["step_1", "step_2", "verify"]
    store = SqliteStore(tmp_path / "runs.db")
    final, record = run(skill, arbiter, store, "ok")
    store.close()
    assert (workspace / "archive" / "notes.txt").read_text() == "archived: hello"
    assert [s.status for s in final.steps] == ["success", "success"]
    assert final.steps[0].payload == "hello world\n"
    assert final.verified is True
    assert final.verification_failures == []
    assert final.verification_unchecked == ["a human glances at the archive"]
    assert record.status == "done"
    # Static params are node config: changing one changes the graph hash.
    other = parse_skill_md(ARCHIVE.replace("archived: hello", "archived: bye"))
    assert Graph(other.subgraph).graph_hash != Graph(skill.subgraph).graph_hash  # type: ignore[arg-type]


def test_D3_verification_failures_are_reported_and_halt(tmp_path: Path, arbiter: Arbiter) -> None:
    text = ARCHIVE.replace("contains: hello}", "contains: goodbye}")
    skill = parse_skill_md(text)
    store = SqliteStore(tmp_path / "runs.db")
    final, record = run(skill, arbiter, store, "bad")
    store.close()
    assert final.verified is False
    assert final.verification_failures == [
        "notes read: payload does not contain 'goodbye' (got 'hello world\\n')"
    ]
    assert record.stopped_by == "workflow/verification_failed"


def test_D3_a_failed_step_halts_before_the_rest(tmp_path: Path, arbiter: Arbiter) -> None:
    skill = parse_skill_md(ARCHIVE.replace("{path: notes.txt}", "{path: missing.txt}"))
    store = SqliteStore(tmp_path / "runs.db")
    final, record = run(skill, arbiter, store, "fail")
    store.close()
    assert [s.status for s in final.steps] == ["error"]
    assert record.stopped_by == "workflow/step_failed"
    assert final.verified is False


def test_D3_workflow_skill_mounts_as_a_subgraph(workspace: Path, arbiter: Arbiter) -> None:
    skill = parse_skill_md(ARCHIVE)
    host = (
        Graph("host", state=WorkflowOutput)
        .with_node(SubgraphNode.from_skill(skill, site="archive"))
        .with_edge(START, "archive")
        .with_edge("archive", END)
    )
    final = host.compile(services={"arbiter": arbiter}).invoke({})
    assert final.verified is True
    assert (workspace / "archive" / "notes.txt").exists()


AGENT = """\
---
name: note-reader
description: Reads notes and answers questions about them.
kind: agent
tools: [choir.fs.read@1.0.0]
max_steps: 4
---
You read notes. Answer in one word.
"""


def test_D3_agent_skill_mounts_react_against_the_scripted_server(arbiter: Arbiter) -> None:
    skill = parse_skill_md(textwrap.dedent(AGENT))
    assert skill.kind == "agent"
    assert skill.state_schema is ReactOutput
    assert sorted(n.id for n in skill.subgraph.nodes) == ["act", "observe", "think"]  # type: ignore[union-attr]
    read = "read"  # the name the model is offered for choir.fs.read@1.0.0

    def script(request: RecordedRequest) -> Reply:
        if not [m for m in request.messages if m["role"] == "tool"]:
            return Reply.tool_calls([(read, {"path": "notes.txt"})])
        return Reply.text("hello")

    with ScriptedOpenAIServer(script) as server:
        chat = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="sk-test")
        try:
            app: CompiledGraph[Any] = Graph(skill.subgraph, impls=skill.impls).compile(  # type: ignore[arg-type]
                services={"model": chat, "arbiter": arbiter}
            )
            final = app.invoke({"task": "What is the first word of notes.txt?"})
        finally:
            chat.close()
        first = server.chat_requests[0]
    assert final.final_answer == "hello"
    assert [r.tool for r in final.tool_calls] == ["choir.fs.read@1.0.0"]
    assert first.messages[0] == {
        "role": "system",
        "content": "You read notes. Answer in one word.",
    }
    assert {t["function"]["name"] for t in first.body["tools"]} == {read}  # type: ignore[index]
