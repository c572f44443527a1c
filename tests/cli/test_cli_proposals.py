"""``stargraph proposals list/show/approve/reject`` over a ``ProposalStore``.

Proposals are made the way agents make them: the ``propose.*`` meta-tools dispatched through
an ``Arbiter`` (and ``ProposalStore.submit`` for the odd case). Implementations passed as
``--implementation module:attr`` live in this module (pytest puts the repository root on
``sys.path``, as the CLI does with the current directory).
"""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from stargraph.skills.machine import ProposalStore, SkillSpecRegistry, proposal_tools
from stargraph.tools import Arbiter, ToolCall, ToolRegistry, tool

DB = Path(".stargraph/proposals.db")

GREETER: dict[str, Any] = {
    "name": "greeter",
    "description": "Greet someone by name.",
    "initial_state": "think",
    "input_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
    "output_schema": {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
    },
    "states": {
        "think": {
            "objective": "Think of a greeting.",
            "allowed_tools": [],
            "transitions": [{"on": "complete", "to": "done"}],
        },
        "done": {"objective": "Greet them.", "terminal": True},
    },
    "max_steps": 5,
    "interruptible": True,
}
MANIFEST: dict[str, Any] = {
    "llm": {
        "name": "acme.greet",
        "description": "Greet someone.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
    "runtime": {"version": "1.0.0", "timeout_ms": 5000, "side_effect": "none"},
}


@tool(id="acme.greet@1.0.0")
def greet(name: str) -> str:
    """Greet someone."""
    return f"hello {name}"


@tool(id="acme.wave@1.0.0")
def wave(name: str) -> str:
    """Wave at someone."""
    return f"*waves at {name}*"


def make_greet() -> Any:
    """A zero-argument factory returning the tool."""
    return greet


not_a_tool = 42


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def ids(tmp_path: Path) -> Iterator[dict[str, str]]:
    """One pending proposal of each kind, made through the meta-tools in the default db."""
    DB.parent.mkdir(parents=True)
    with ProposalStore(DB) as store:
        registry = ToolRegistry.build(builtins=proposal_tools(store, session="s-1"))
        workspace = tmp_path / "ws"
        workspace.mkdir()
        with Arbiter(registry, workspace=workspace) as arbiter:
            made = {
                kind: arbiter.dispatch(ToolCall(tool=f"propose.{kind}", args=args, lane=lane))
                for kind, args, lane in (
                    ("skill", {"spec": GREETER, "rationale": "users ask"}, "core"),
                    ("config_change", {"changes": {"model": "gpt-x"}}, "edge"),
                    ("tool", {"manifest": MANIFEST}, "core"),
                )
            }
        yield {kind: str(r.payload["proposal_id"]) for kind, r in made.items()}  # type: ignore[index,call-overload]


def sg(*args: str) -> Result:
    from stargraph.cli._app import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _one_paragraph(result: Result) -> None:
    error = result.stderr[result.stderr.index("error: ") :]
    assert "\n\n" not in error.strip()
    assert "Traceback" not in result.stderr


def _status(proposal_id: str) -> tuple[str, str | None]:
    with ProposalStore(DB) as store:
        found = store.get(proposal_id)
    return found.status, found.reason


# --------------------------------------------------------------------------- list / show


def test_list_shows_every_proposal_and_filters(ids: dict[str, str]) -> None:
    result = sg("proposals", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:5] == ["ID", "KIND", "STATUS", "SUBJECT", "LANE"]
    assert [line.split()[:5] for line in lines[1:]] == [
        [ids["skill"], "skill", "pending", "greeter", "core"],
        [ids["config_change"], "config_change", "pending", "model", "edge"],
        [ids["tool"], "tool", "pending", "acme.greet", "core"],
    ]
    assert "users ask" in lines[1]
    only_tools = sg("proposals", "list", "--kind", "tool", "--json")
    assert only_tools.exit_code == 0
    data = json.loads(only_tools.stdout)
    assert [(p["id"], p["subject"], p["payload"]) for p in data] == [
        (ids["tool"], "acme.greet", {"manifest": MANIFEST})
    ]
    none = sg("proposals", "list", "--status", "approved")
    assert (none.exit_code, none.stdout) == (0, "")
    assert "no proposals (approved)" in none.stderr


def test_list_failures(tmp_path: Path) -> None:
    missing = sg("proposals", "list")
    assert missing.exit_code == 1
    _one_paragraph(missing)
    assert "no proposals database at .stargraph/proposals.db" in missing.stderr
    assert not DB.exists()  # reading never creates an empty database
    bad = sg("proposals", "list", "--status", "maybe")
    assert bad.exit_code == 2
    assert "'maybe' is not one of" in bad.stderr


def test_show_prints_the_proposal_and_its_log(ids: dict[str, str]) -> None:
    result = sg("proposals", "show", ids["skill"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["id"], data["kind"], data["status"], data["subject"]) == (
        ids["skill"],
        "skill",
        "pending",
        "greeter",
    )
    assert data["payload"] == {"spec": GREETER}
    assert data["session"] == "s-1"
    assert [e["action"] for e in data["log"]] == ["submitted"]


def test_show_of_an_unknown_proposal(ids: dict[str, str]) -> None:
    result = sg("proposals", "show", "prop-9999-deadbeef")
    assert result.exit_code == 1
    _one_paragraph(result)
    assert "no proposal 'prop-9999-deadbeef'" in result.stderr
    assert "stargraph proposals list" in result.stderr


# --------------------------------------------------------------------------- approve


def test_approving_a_skill_writes_its_spec_to_the_agent_dir(ids: dict[str, str]) -> None:
    result = sg("proposals", "approve", ids["skill"], "--note", "looks good")
    assert result.exit_code == 0, result.output
    written = Path("skills/greeter.json")
    assert f"approved {ids['skill']} (skill greeter): wrote {written}" in result.stdout
    with ProposalStore(DB) as store:
        proposal = store.get(ids["skill"])
        assert json.loads(written.read_text()) == store.spec_of(proposal).to_json()
    assert (proposal.status, proposal.reason) == ("approved", "looks good")
    # It lasts: the next registry build of that agent directory has the skill.
    loaded = SkillSpecRegistry.build(agent_dir="skills")
    assert "greeter" in loaded
    assert proposal.registry_version is not None
    assert proposal.registry_version in result.stdout
    assert list(Path("skills").iterdir()) == [written]  # no temporary file left behind

    again = sg("proposals", "approve", ids["skill"])
    assert again.exit_code == 1
    _one_paragraph(again)
    assert "already approved" in again.stderr


def test_approving_a_skill_into_a_chosen_agent_dir_replaces_the_old_file(
    ids: dict[str, str],
) -> None:
    agent = Path("agent")
    agent.mkdir()
    old = copy.deepcopy(GREETER)
    old["description"] = "The old greeter."
    (agent / "greeter.json").write_text(json.dumps(old))
    result = sg("proposals", "approve", ids["skill"], "--agent-dir", "agent")
    assert result.exit_code == 0, result.output
    assert "replaced agent/greeter.json" in result.stdout
    spec = json.loads((agent / "greeter.json").read_text())
    assert spec["description"] == "Greet someone by name."


def test_approving_a_skill_that_cannot_be_written_approves_nothing(ids: dict[str, str]) -> None:
    Path("taken").write_text("a file, not a directory")
    result = sg("proposals", "approve", ids["skill"], "--agent-dir", "taken/agent")
    assert result.exit_code == 1
    _one_paragraph(result)
    assert "cannot write taken/agent/greeter.json" in result.stderr
    assert _status(ids["skill"]) == ("pending", None)


def test_approving_a_skill_whose_spec_became_invalid_fails(ids: dict[str, str]) -> None:
    broken = copy.deepcopy(GREETER)
    broken["states"]["orphan"] = {
        "objective": "Never reached.",
        "transitions": [{"on": "complete", "to": "done"}],
    }
    with sqlite3.connect(DB) as db:  # tampered with after submission
        db.execute(
            "UPDATE proposals SET payload = ? WHERE id = ?",
            (json.dumps({"spec": broken}), ids["skill"]),
        )
    result = sg("proposals", "approve", ids["skill"])
    assert result.exit_code == 1
    _one_paragraph(result)
    assert f"proposal {ids['skill']} is invalid" in result.stderr
    assert "unreachable" in result.stderr
    assert not Path("skills").exists()
    assert _status(ids["skill"]) == ("pending", None)


@pytest.mark.parametrize(
    "ref", ["tests.cli.test_cli_proposals:greet", "tests.cli.test_cli_proposals:make_greet"]
)
def test_approving_a_tool_with_its_implementation(ids: dict[str, str], ref: str) -> None:
    result = sg("proposals", "approve", ids["tool"], "--implementation", ref)
    assert result.exit_code == 0, result.output
    assert f"approved {ids['tool']} (tool acme.greet@1.0.0)" in result.stdout
    assert "register_tools" in result.stdout
    assert _status(ids["tool"])[0] == "approved"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, "write the tool and approve with --implementation module:attr"),
        (
            ["--implementation", "tests.cli.test_cli_proposals:not_a_tool"],
            1,
            "is a int, not a tool",
        ),
        (
            ["--implementation", "tests.cli.test_cli_proposals:nope"],
            1,
            "cannot import --implementation",
        ),
        (["--implementation", "no_such_module:greet"], 1, "cannot import --implementation"),
        (["--implementation", "tests.cli.test_cli_proposals:wave"], 1, "the implementation is"),
        (["--agent-dir", "skills"], 2, "--agent-dir is for skill proposals"),
    ],
)
def test_approving_a_tool_failures(
    ids: dict[str, str], args: list[str], code: int, message: str
) -> None:
    result = sg("proposals", "approve", ids["tool"], *args)
    assert result.exit_code == code, result.output
    _one_paragraph(result)
    assert message in result.stderr
    assert _status(ids["tool"]) == ("pending", None)


def test_approving_a_config_change_prints_the_new_values(ids: dict[str, str]) -> None:
    wrong = sg("proposals", "approve", ids["config_change"], "--implementation", "m:a")
    assert wrong.exit_code == 2
    assert "--implementation is for tool proposals" in wrong.stderr
    result = sg("proposals", "approve", ids["config_change"])
    assert result.exit_code == 0, result.output
    assert f"approved {ids['config_change']} (config change" in result.stdout
    assert json.loads(result.stdout.split("new values:\n", 1)[1]) == {"model": "gpt-x"}
    assert _status(ids["config_change"])[0] == "approved"


def test_approving_an_unknown_proposal(ids: dict[str, str]) -> None:
    result = sg("proposals", "approve", "prop-0404-00000000")
    assert result.exit_code == 1
    _one_paragraph(result)
    assert "no proposal 'prop-0404-00000000'" in result.stderr


# --------------------------------------------------------------------------- reject


def test_reject_records_the_reason(ids: dict[str, str]) -> None:
    result = sg("proposals", "reject", ids["config_change"], "--reason", "not now")
    assert result.exit_code == 0, result.output
    assert f"rejected {ids['config_change']} (config_change model): not now" in result.stdout
    assert _status(ids["config_change"]) == ("rejected", "not now")
    listed = sg("proposals", "list", "--status", "rejected")
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == [ids["config_change"]]
    shown = json.loads(sg("proposals", "show", ids["config_change"]).stdout)
    assert [e["action"] for e in shown["log"]] == ["submitted", "rejected"]
    assert shown["log"][-1]["detail"]["reason"] == "not now"

    again = sg("proposals", "reject", ids["config_change"], "--reason", "still no")
    assert again.exit_code == 1
    _one_paragraph(again)
    assert "already rejected" in again.stderr
    approve = sg("proposals", "approve", ids["config_change"])
    assert approve.exit_code == 1
    assert "already rejected" in approve.stderr


def test_reject_failures(ids: dict[str, str]) -> None:
    no_reason = sg("proposals", "reject", ids["tool"])
    assert no_reason.exit_code == 2
    assert "Missing option '--reason'" in no_reason.stderr
    blank = sg("proposals", "reject", ids["tool"], "--reason", "  ")
    assert blank.exit_code == 2
    _one_paragraph(blank)
    unknown = sg("proposals", "reject", "prop-0404-00000000", "--reason", "x")
    assert unknown.exit_code == 1
    _one_paragraph(unknown)
    assert "no proposal" in unknown.stderr
    elsewhere = sg("proposals", "reject", ids["tool"], "--reason", "x", "--db", "other.db")
    assert elsewhere.exit_code == 1
    assert "no proposals database at other.db" in elsewhere.stderr
    assert _status(ids["tool"]) == ("pending", None)
