"""``stargraph skills`` reads the project: SKILL.md and SkillSpec files under ``./skills/``,
the project's own ``@tool``s (``tools.py`` or ``[tool.stargraph] tools``), clashes named, a
missing tool named, and a SkillSpec machine run with ``--model`` that survives SIGKILL,
resumes and replays from the run database."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import stargraph
from stargraph.errors import RegistryError, SkillValidationError
from tests.cli.test_cli_paths import run

# The console script runs the stargraph under test, wherever the environment installed one.
SRC = {"PYTHONPATH": str(Path(stargraph.__file__).parents[1])}

TOOLS = '''
from stargraph.tools import tool


@tool(id="notes.count_words@1.0.0")
def count_words(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())
'''

SKILL_MD = """---
name: word-count
description: Count the words of a fixed text.
kind: workflow
tools: [notes.count_words@1.0.0]
workflow:
  - {step: count, tool: notes.count_words@1.0.0, params: {text: "one two three"}}
verification:
  - {check: three words, equals: 3}
---
Counts words.
"""

SPEC = {
    "name": "review",
    "description": "Review a draft, then approve it.",
    "initial_state": "read",
    "max_steps": 8,
    "interruptible": True,
    "input_schema": {
        "type": "object",
        "properties": {"draft": {"type": "string"}},
        "required": ["draft"],
    },
    "output_schema": {
        "type": "object",
        "properties": {"verdict": {"type": "string"}},
        "required": ["verdict"],
    },
    "states": {
        "read": {
            "objective": "Count the draft's words.",
            "allowed_tools": ["notes.count_words"],
            "transitions": [{"on": "counted", "to": "decide"}],
        },
        "decide": {
            "objective": "Approve or reject.",
            "allowed_tools": [],
            "transitions": [{"on": "approve", "to": "done"}],
        },
        "done": {"terminal": True},
    },
}

# A model that follows the protocol from what each request shows it: the state and the notes
# (tool results, rejections) in the execution context. POWER_CUT kills its process in state
# decide (after the steps before it committed); MISBEHAVE calls a tool decide does not allow.
MODEL = """
import json, os, signal

from stargraph.llm import ChatMessage, ChatResponse, ToolCall
from stargraph.testing import ScriptedChatModel


def call(name, **arguments):
    made = ToolCall(id=f"call-{name}", name=name, arguments=json.dumps(arguments))
    return ChatResponse(message=ChatMessage.assistant(tool_calls=[made]))


def answer(request):
    context = json.loads(request.messages[-1].content.partition("\\n")[2])
    state, notes = context["state"], context["notes"]
    if state == "read":
        if not any(note["kind"] == "tool_result" for note in notes):
            return call("notes__count_words__v1_0_0", text="a b c")
        return call("counted", reason="3 words")
    if state == "decide":
        if os.environ.get("POWER_CUT") == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("MISBEHAVE") == "1":
            return call("notes__count_words__v1_0_0", text="again")
        return call("approve", reason="short")
    return call("finish", verdict="approved")


scripted = ScriptedChatModel(answer)
"""


def write_project(root: Path, *, tools: bool = True) -> Path:
    (root / ".stargraph").mkdir(parents=True, exist_ok=True)
    if tools:
        (root / "tools.py").write_text(TOOLS)
    (root / "skills" / "word-count").mkdir(parents=True)
    (root / "skills" / "word-count" / "SKILL.md").write_text(SKILL_MD)
    (root / "skills" / "review.json").write_text(json.dumps(SPEC))
    (root / "model.py").write_text(MODEL)
    return root


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project folder as the current folder; its modules (``tools``, ``model``) are
    forgotten afterwards, so the next test imports its own."""
    root = write_project(tmp_path / "proj")
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("tools", "model", "mypkg", "mypkg.tools"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield root
    for name in ("tools", "model", "mypkg", "mypkg.tools"):
        sys.modules.pop(name, None)


def sg(*args: str, env: dict[str, str] | None = None) -> Result:
    from stargraph.cli._app import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)


def rows(result: Result) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}


# --------------------------------------------------------------------------- list / show


def test_issue44_skills_list_shows_the_projects_skill_md_and_skillspec(project: Path) -> None:
    listed = sg("skills", "list")
    assert listed.exit_code == 0, listed.output
    found = rows(listed)
    assert found["word-count"][:4] == [
        "word-count",
        "0.1.0",
        "workflow",
        "skills/word-count/SKILL.md",
    ]
    assert found["review"][:4] == ["review", "1.0.0", "machine", "skills/review.json"]
    assert found["rag"][3] == "stargraph"  # installed skills are still there
    data = {s["name"]: s for s in json.loads(sg("skills", "list", "--json").stdout)}
    assert data["review"]["provider"] == "skills/review.json"


def test_issue44_skills_show_prints_states_and_workflow_steps(project: Path) -> None:
    machine = sg("skills", "show", "review")
    assert machine.exit_code == 0, machine.output
    assert "provider   skills/review.json" in machine.stdout
    assert "read: tools [notes.count_words] events [counted -> decide]" in machine.stdout
    assert "done (terminal: finish)" in machine.stdout
    workflow = sg("skills", "show", "word-count")
    assert "tools      notes.count_words@1.0.0" in workflow.stdout
    assert '1. count: notes.count_words@1.0.0 {"text": "one two three"}' in workflow.stdout


def test_issue44_skills_are_found_from_a_subfolder_of_the_project(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deeper = project / "src" / "pkg"
    deeper.mkdir(parents=True)
    monkeypatch.chdir(deeper)
    listed = sg("skills", "list")
    assert listed.exit_code == 0, listed.output
    assert {"word-count", "review"} <= set(rows(listed))


# --------------------------------------------------------------------------- run a SKILL.md


def test_issue44_skills_run_a_skill_md_workflow_with_the_projects_tools(project: Path) -> None:
    result = sg("skills", "run", "word-count", "--run-id", "w-1", "-q")
    assert result.exit_code == 0, result.output
    final = json.loads(result.stdout)
    assert [(s["tool"], s["payload"]) for s in final["steps"]] == [("notes.count_words@1.0.0", 3)]
    assert final["verified"] is True
    runs = {r["run_id"]: r for r in json.loads(sg("runs", "--json").stdout)}
    assert runs["w-1"]["status"] == "done"
    shown = sg("show", "w-1")
    assert shown.exit_code == 0, shown.output
    assert sg("replay", "w-1", "-q").exit_code == 0


def test_issue44_pyproject_names_the_projects_tools_module(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "tools.py").unlink()
    (project / "mypkg").mkdir()
    (project / "mypkg" / "__init__.py").write_text("")
    (project / "mypkg" / "tools.py").write_text(TOOLS)
    (project / "pyproject.toml").write_text('[tool.stargraph]\ntools = "mypkg.tools"\n')
    result = sg("skills", "run", "word-count", "-q")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["steps"][0]["payload"] == 3


# --------------------------------------------------------------------------- errors


def test_issue44_a_skill_naming_a_tool_nobody_provides_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stargraph.cli._project import load_project

    root = write_project(tmp_path / "proj", tools=False)
    monkeypatch.chdir(root)
    with pytest.raises(SkillValidationError) as raised:
        load_project()
    message = str(raised.value)
    for needed in (
        "skills/word-count/SKILL.md#/tools/0",
        "skill 'word-count' names tool 'notes.count_words@1.0.0', which no one provides",
        "skills/review.json#/states/read/allowed_tools/0",
        "skill 'review' names tool 'notes.count_words'",
        "@tool(id='notes.count_words@1.0.0') in tools.py",
        "[tool.stargraph] tools",
    ):
        assert needed in message, message
    listed = sg("skills", "list")
    assert listed.exit_code == 1
    assert listed.stderr.startswith("error: skills folder ")
    assert "Traceback" not in listed.stderr


def test_issue44_a_skill_name_defined_twice_fails_naming_both(project: Path) -> None:
    from stargraph.cli._project import load_project

    clash = project / "skills" / "rag"
    clash.mkdir()
    (clash / "SKILL.md").write_text(SKILL_MD.replace("name: word-count", "name: rag"))
    with pytest.raises(RegistryError) as raised:
        load_project()
    assert "skill 'rag' is defined twice, by skills/rag/SKILL.md and by stargraph (built in)" in (
        str(raised.value)
    )
    (clash / "SKILL.md").write_text(SKILL_MD.replace("description: Count", "description: Also"))
    result = sg("skills", "list")
    assert result.exit_code == 1
    assert (
        "skill 'word-count' is defined twice, by skills/rag/SKILL.md and by "
        "skills/word-count/SKILL.md" in result.stderr
    )


def test_issue44_a_bad_skill_md_names_the_file_and_key(project: Path) -> None:
    (project / "skills" / "word-count" / "SKILL.md").write_text(
        "---\nname: Word Count\nkind: workflow\n---\n"
    )
    result = sg("skills", "show", "review")
    assert result.exit_code == 1
    for needed in ("skills/word-count/SKILL.md#/name", "skills/word-count/SKILL.md#/description"):
        assert needed in result.stderr, result.stderr


# --------------------------------------------------------------------------- machines


def _final(result: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_issue44_a_skillspec_machine_runs_with_a_model_is_killed_resumes_and_replays(
    tmp_path: Path,
) -> None:
    root = write_project(tmp_path / "proj")
    args = ("skills", "run", "review", "--model", "model:scripted", "--input")
    done = run(root, *args, '{"draft": "a b c"}', "--run-id", "m-1", "-q", env=SRC)
    assert _final(done)["output"] == {"verdict": "approved"}

    killed = run(
        root,
        *args,
        '{"draft": "a b c"}',
        "--run-id",
        "m-2",
        "-q",
        check=False,
        env={**SRC, "POWER_CUT": "1"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    statuses = {r["run_id"]: r for r in json.loads(run(root, "runs", "--json", env=SRC).stdout)}
    assert statuses["m-2"]["status"] == "orphaned"
    assert statuses["m-2"]["last_step"] == 2  # read: the tool, then the event
    # No --graph: the run's archived reference rebuilds the skill with its model and tools.
    resumed = run(root, "resume", "m-2", "-q", env=SRC)
    final = _final(resumed)
    assert (final["status"], final["reason"], final["output"]) == (
        "done",
        "done",
        {"verdict": "approved"},
    )
    assert [(t["from"], t["to"]) for t in final["transitions"]] == [
        ("read", "decide"),
        ("decide", "done"),
    ]
    replayed = run(root, "replay", "m-2", "-q", env=SRC)
    assert "matches its record" in replayed.stdout + replayed.stderr
    assert "done by rule machine/done" in run(root, "show", "m-2", env=SRC).stdout
    assert run(root, "diff", "m-1", "m-2", env=SRC, check=False).returncode == 0


def test_issue44_machine_rejections_spend_the_retry_budget(project: Path) -> None:
    result = sg(
        "skills",
        "run",
        "review",
        "--model",
        "model:scripted",
        "--input",
        '{"draft": "a b c"}',
        "-q",
        env={"MISBEHAVE": "1"},
    )
    assert result.exit_code == 0, result.output
    final = json.loads(result.stdout)
    assert (final["status"], final["reason"], final["state"]) == (
        "error",
        "retry_budget_exhausted",
        "error",
    )
    rejected = [e["data"] for e in final["events"] if e["kind"] == "rejected"]
    assert [(r["code"], r["state"], r["retries_left"]) for r in rejected] == [
        ("tool_not_allowed", "decide", 2),
        ("tool_not_allowed", "decide", 1),
        ("tool_not_allowed", "decide", 0),
    ]
    assert rejected[0]["proposed"] == "notes__count_words__v1_0_0"
    assert rejected[0]["valid_transitions"] == [{"on": "approve", "to": "done"}]


def test_issue44_model_option_refuses_an_object_that_is_no_chat_model(project: Path) -> None:
    (project / "model.py").write_text(textwrap.dedent("not_a_model = 42\n"))
    result = sg("skills", "run", "review", "--model", "model:not_a_model", "--input", "{}")
    assert result.exit_code == 2
    assert "--model model:not_a_model is an object of type int, not a chat model" in result.stderr
