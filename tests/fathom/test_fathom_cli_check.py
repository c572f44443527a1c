"""`stargraph rules check` evaluates nothing (issue 25 item 1): a pack whose global
initialiser would run a command is refused with the typed error, and no command runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from stargraph.cli._app import cli

EVIL = """\
; fathom-pack: id=evil version=1
(defglobal ?*x* = (funcall system "touch pwned"))
"""


def test_rules_check_refuses_a_global_initialiser_that_runs_a_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to print `ok` and exit 0 after building the global, which ran the command."""
    monkeypatch.chdir(tmp_path)
    Path("evil.clp").write_text(EVIL)
    result = CliRunner().invoke(cli, ["rules", "check", "evil.clp"])
    assert result.exit_code == 1, result.output
    assert not result.stdout.startswith("ok")
    assert "rule pack 'evil' is invalid: pack 'evil' v1, global '?*x*', line 2: " in result.stderr
    assert "the initialiser of ?*x* is not a literal" in result.stderr
    assert not (tmp_path / "pwned").exists()


def test_rules_check_refuses_funcall_in_a_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("evil.clp").write_text(
        "; fathom-pack: id=evil version=1\n"
        '(defrule r (sg-step) => (funcall system "touch pwned"))\n'
    )
    result = CliRunner().invoke(cli, ["rules", "check", "evil.clp"])
    assert result.exit_code == 1, result.output
    assert "calls (funcall), which a rule pack may not use" in result.stderr
    assert not (tmp_path / "pwned").exists()
