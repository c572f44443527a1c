"""``stargraph fork --as-node``: an edited fork routed as the node that wrote the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

GRAPH = "tests.runtime.test_issue44_fork_as_node:triage"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def sg(*args: str) -> Result:
    from stargraph.cli._app import cli

    return CliRunner().invoke(cli, list(args))


def _fork(*extra: str) -> tuple[str, Result]:
    result = sg("fork", "t-1", "--step", "1", "--update", '{"category": "spam"}', *extra)
    assert result.exit_code == 0, result.output
    return result.stdout.strip(), result


def test_issue44_cli_fork_as_node_reroutes() -> None:
    ran = sg("run", GRAPH, "--input", '{"text": "my invoice"}', "--run-id", "t-1", "-q")
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["log"] == ["classify", "investigate"]
    new_id, forked = _fork("--as-node", "classify")
    assert "routed as classify: next discard" in forked.stderr
    resumed = sg("resume", new_id, "-q")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["log"] == ["classify", "discard"]
    kept, _ = _fork()
    assert json.loads(sg("resume", kept, "-q").stdout)["log"] == ["classify", "investigate"]


def test_issue44_cli_fork_unknown_as_node() -> None:
    assert sg("run", GRAPH, "--run-id", "t-1", "-q").exit_code == 0
    result = sg("fork", "t-1", "--step", "1", "--as-node", "nobody")
    assert result.exit_code != 0
    assert "'nobody'" in result.stderr
    assert "['classify', 'discard', 'investigate']" in result.stderr
    assert "Traceback" not in result.output
