"""A SKILL.md workflow replays offline: its tool calls come from the record, with no arbiter.

The ReAct loop and the SkillSpec machine already replay with no services at all; the
workflow's steps asked for ``services["arbiter"]`` before the record could answer, so a
replay compiled without one failed at its first step (the combination grid found it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stargraph import CompiledGraph
from stargraph.checkpoint import SqliteStore
from stargraph.graph import Graph
from stargraph.skills.markdown import parse_skill_md
from stargraph.tools import Arbiter, ToolRegistry, builtin_tools
from tests.skills.markdown.test_skillmd_running import ARCHIVE


def _graph() -> Graph[Any]:
    skill = parse_skill_md(ARCHIVE, source="archive/SKILL.md")
    assert skill.subgraph is not None
    assert not isinstance(skill.subgraph, str)
    return Graph(skill.subgraph, impls=skill.impls)


def test_issue44_workflow_replays_without_an_arbiter(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello world\n", encoding="utf-8")
    with Arbiter(ToolRegistry.build(builtins=builtin_tools()), workspace=workspace) as arbiter:
        live: CompiledGraph[Any] = _graph().compile(
            store=SqliteStore(tmp_path / "runs.db"), services={"arbiter": arbiter}
        )
        final = live.invoke({}, run_id="archive")
    archive = workspace / "archive" / "notes.txt"
    assert archive.read_text(encoding="utf-8") == "archived: hello"
    archive.unlink()
    offline: CompiledGraph[Any] = _graph().compile(store=SqliteStore(tmp_path / "runs.db"))
    replayed = offline.replay("archive")
    assert replayed == final
    assert replayed.verified is True
    # No tool body ran: the write the record holds was not made again.
    assert not archive.exists()
