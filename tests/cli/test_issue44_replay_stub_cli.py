"""``stargraph replay`` prints the nodes whose bodies run again before it starts, and
``--stub`` serves their recorded writes instead (the graph: ``tests/replay/effectgraph.py``,
whose plain nodes append to a file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.replay.effectgraph import lines

GRAPH = "tests.replay.effectgraph:effects"
EFFECTS = ["record", "stamp", "touch a"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def sg(*args: str) -> Result:
    from stargraph.cli._app import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def recorded(ledger: Path) -> None:
    given = json.dumps({"ledger": str(ledger), "items": ["a"]})
    result = sg("run", GRAPH, "--input", given, "--run-id", "r1", "-q")
    assert result.exit_code == 0, result.output
    assert lines(ledger) == EFFECTS


def test_issue44_cli_replay_lists_the_rerun_nodes_before_it_starts(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    recorded(ledger)
    result = sg("replay", "r1")
    assert result.exit_code == 0, result.output
    line = (
        "replay of run r1 runs these node bodies again: record, touch, audit/stamp; their "
        "model, tool and ctx.once calls come from the record"
    )
    assert line in result.stderr
    # Printed before the replay's first event; the bodies did run again.
    assert result.output.index(line) < result.output.index("run r1 started")
    assert "--stub all serves their recorded writes instead" in result.stderr
    assert lines(ledger) == sorted(EFFECTS + EFFECTS)


@pytest.mark.parametrize("stub", ["all", "record,touch,audit/stamp", "record, touch, audit"])
def test_issue44_cli_replay_stub_leaves_the_file_alone(tmp_path: Path, stub: str) -> None:
    ledger = tmp_path / "ledger.txt"
    recorded(ledger)
    result = sg("replay", "r1", "--stub", stub)
    assert result.exit_code == 0, result.output
    assert "no node body runs again" in result.stderr
    assert "replay of run r1 matches its record (4 steps, offline)" in result.stderr
    assert "[step 4] run r1 finished" in result.stdout
    assert lines(ledger) == EFFECTS


def test_issue44_cli_replay_stub_of_a_cassette(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    recorded(ledger)
    assert sg("replay", "r1", "-q", "--stub", "all", "--export", "r1.json").exit_code == 0
    result = sg("replay", "r1.json", "-q", "--stub", "record,touch")
    assert result.exit_code == 0, result.output
    assert "runs these node bodies again: audit/stamp;" in result.stderr
    assert lines(ledger) == sorted([*EFFECTS, "stamp"])


def test_issue44_cli_replay_stub_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    recorded(tmp_path / "ledger.txt")
    unknown = sg("replay", "r1", "--stub", "nope")
    assert unknown.exit_code == 1
    assert "stub names 'nope', not a node of the graph" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    empty = sg("replay", "r1", "--stub", ",")
    assert empty.exit_code == 2
    assert "--stub expects all, must or node names" in empty.stderr
    live = sg("replay", "r1", "--stub", "all", "--from-step", "2")
    assert live.exit_code == 2
    assert "nothing to stub" in live.stderr
