"""Seams of the command line: the run database found in a parent folder (as git finds
``.git``), ``resume`` saying that the graph file changed since the run was recorded, and
``rules check`` without ``--graph`` passing rules that read state fields, with a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import stargraph
from tests.cli.test_cli_paths import TRIAGE, run

CHAIN = "tests.cli.test_cli_commands:chain"
# The console script runs the stargraph under test, wherever the environment installed one.
SRC = {"PYTHONPATH": str(Path(stargraph.__file__).parents[1])}


def sg(*args: str) -> Result:
    from stargraph.cli._app import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


# --------------------------------------------------------------------------- --db discovery


def test_issue44_commands_find_the_database_in_a_parent_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sg("run", CHAIN, "--run-id", "top", "-q").exit_code == 0
    deeper = tmp_path / "src" / "pkg"
    deeper.mkdir(parents=True)
    monkeypatch.chdir(deeper)

    listed = sg("runs", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["top"]
    assert sg("show", "top").exit_code == 0

    # A run started below the project goes into the project's database, not a new one, and
    # its hints need no --db there.
    assert sg("run", CHAIN, "--run-id", "below", "-q").exit_code == 0
    waiting = sg("run", "tests.cli.test_cli_commands:approval", "--run-id", "w", "-q")
    assert "stargraph resume w --response JSON --graph" in waiting.stdout
    assert "--db" not in waiting.stdout
    assert not (deeper / ".stargraph").exists()
    listed = sg("runs", "--json")
    assert sorted(r["run_id"] for r in json.loads(listed.stdout)) == ["below", "top", "w"]


def test_issue44_an_explicit_db_is_used_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sg("run", CHAIN, "--run-id", "top", "-q").exit_code == 0
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    result = sg("runs", "--db", ".stargraph/stargraph.db")
    assert result.exit_code == 1
    assert "no run database at .stargraph/stargraph.db" in result.stderr
    assert sg("runs", "--json").exit_code == 0  # the default still finds the parent's


def test_issue44_the_search_stops_at_the_top_of_a_git_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sg("run", CHAIN, "--run-id", "outer", "-q").exit_code == 0
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "app").mkdir()
    monkeypatch.chdir(repo / "app")
    result = sg("runs")
    assert result.exit_code == 1
    assert "no run database at .stargraph/stargraph.db" in result.stderr
    # ...and a database at the repository's top is found from inside it.
    monkeypatch.chdir(repo)
    assert sg("run", CHAIN, "--run-id", "inner", "-q").exit_code == 0
    monkeypatch.chdir(repo / "app")
    listed = sg("runs", "--json")
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["inner"]


# --------------------------------------------------------------------------- resume


def test_issue44_resume_warns_when_the_graph_file_now_hashes_differently(
    tmp_path: Path,
) -> None:
    (tmp_path / "triage.py").write_text(TRIAGE)
    started = run(tmp_path, "run", "triage.py", "--run-id", "t-1", "--input", "{}", "-q", env=SRC)
    assert "waiting" in started.stdout
    old_hash = run(tmp_path, "hash", "triage.py", env=SRC).stdout.strip()
    edited = TRIAGE.replace('Graph("triage"', 'Graph("triage-v2"')
    (tmp_path / "triage.py").write_text(edited)
    new_hash = run(tmp_path, "hash", "triage.py", env=SRC).stdout.strip()
    assert new_hash != old_hash

    resumed = run(tmp_path, "resume", "t-1", "--response", "true", "-q", env=SRC)
    assert json.loads(resumed.stdout)["log"] == ["classify", "approved=True"]
    warning = [line for line in resumed.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warning) == 1, resumed.stderr
    assert "triage.py" in warning[0]
    assert old_hash in warning[0]
    assert new_hash in warning[0]
    assert "archived graph" in warning[0]


# --------------------------------------------------------------------------- rules check

STATE_RULE = """; fathom-pack: id=big version=1
(defrule big
  (sg-step (node "work"))
  (sg-state (count ?c&:(> ?c 3)) (label "x"))
  =>
  (assert (sg-decision (rule big) (kind halt) (reason "big"))))
"""


def test_issue44_rules_check_without_graph_warns_about_state_fields(tmp_path: Path) -> None:
    pack = tmp_path / "big.clp"
    pack.write_text(STATE_RULE)
    result = sg("rules", "check", str(pack))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("ok: rule pack big@1 sha256:")
    assert result.stderr.startswith("warning: rule pack 'big' reads state fields count, label")
    assert "--graph" in result.stderr


def test_issue44_rules_check_without_graph_still_checks_the_rest(tmp_path: Path) -> None:
    pack = tmp_path / "big.clp"
    pack.write_text(STATE_RULE.replace("(> ?c 3)", "(> ?c)"))
    result = sg("rules", "check", str(pack))
    assert result.exit_code == 1
    assert "Function '>' expected at least 2 arguments" in result.stderr
    assert "not a rule fact" not in result.stderr
