"""The CLI tells a halted run from a done one: ``runs --status halted``, ``show``, the live
lines, ``resume`` of a halted run, and a fork nobody continued (``pending``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

BUDGET = "tests.runtime.test_issue44_outcomes:budget"
SUCCESS = "tests.runtime.test_issue44_outcomes:success"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def sg(*args: str) -> Result:
    from stargraph.cli._app import cli

    return CliRunner().invoke(cli, list(args))


def _run(graph: str, run_id: str, *extra: str) -> Result:
    result = sg("run", graph, "--run-id", run_id, "--plain", *extra)
    assert result.exit_code == 0, result.output
    return result


def test_issue44_cli_runs_and_show_say_halted_with_rule_and_reason() -> None:
    ran = _run(BUDGET, "b-1")
    assert "run b-1 halted by rule termination/error_budget: error_budget_exhausted" in ran.stderr
    _run(SUCCESS, "s-1", "--input", '{"finish_at": 2}')
    halted = sg("runs", "--status", "halted")
    assert halted.exit_code == 0, halted.output
    assert [line.split()[0] for line in halted.stdout.splitlines()[1:]] == ["b-1"]
    assert "halted" in halted.stdout.splitlines()[1].split()
    done = sg("runs", "--status", "done")
    assert [line.split()[0] for line in done.stdout.splitlines()[1:]] == ["s-1"]
    shown = sg("show", "b-1")
    assert shown.exit_code == 0, shown.output
    assert (
        "status     halted by rule termination/error_budget: error_budget_exhausted" in shown.stdout
    )
    shown = sg("show", "s-1")
    assert "status     done by rule termination/done: done" in shown.stdout
    as_json = json.loads(sg("runs", "--json").stdout)
    assert {r["run_id"]: (r["status"], r["stop_reason"]) for r in as_json} == {
        "b-1": ("halted", "error_budget_exhausted"),
        "s-1": ("done", "done"),
    }


def test_issue44_cli_resume_of_a_halted_run_says_it_ended() -> None:
    _run(BUDGET, "b-1")
    result = sg("resume", "b-1")
    assert result.exit_code != 0
    assert "halted by rule termination/error_budget" in result.stderr
    assert "nothing to resume" in result.stderr
    assert "Traceback" not in result.output


def test_issue44_cli_fork_is_pending_in_runs_and_show() -> None:
    _run(SUCCESS, "s-1", "--input", '{"finish_at": 2}')
    forked = sg("fork", "s-1", "--step", "1")
    assert forked.exit_code == 0, forked.output
    fork_id = forked.stdout.strip()
    pending = sg("runs", "--status", "pending")
    assert [line.split()[0] for line in pending.stdout.splitlines()[1:]] == [fork_id]
    assert sg("runs", "--status", "running").stdout.strip() == ""
    assert "status     pending (a fork never continued" in sg("show", fork_id).stdout
    assert sg("resume", fork_id, "-q").exit_code == 0
    assert "status     done" in sg("show", fork_id).stdout


def test_issue44_cli_show_names_the_node_a_fork_was_routed_as() -> None:
    graph = "tests.runtime.test_issue44_fork_as_node:triage"
    _run(graph, "t-1", "--input", '{"text": "my invoice"}')
    update = ("--update", '{"category": "spam"}')
    routed = sg("fork", "t-1", "--step", "1", *update, "--as-node", "classify")
    kept = sg("fork", "t-1", "--step", "1", *update)
    assert routed.exit_code == 0, routed.output
    shown = sg("show", routed.stdout.strip()).stdout
    assert "forked     from t-1 at step 1, its update routed as classify" in shown
    assert "status     pending" in shown
    assert "routed as" not in sg("show", kept.stdout.strip()).stdout
