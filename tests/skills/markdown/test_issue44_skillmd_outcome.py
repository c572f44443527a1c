"""A SKILL.md workflow whose step fails or whose checks fail ends ``halted``, with the rule
and reason on the run record; one that passes ends ``done``."""

# Fixtures are imported from test_skillmd_running and requested as parameters.
# ruff: noqa: F811

from __future__ import annotations

from pathlib import Path

from stargraph.checkpoint import SqliteStore
from stargraph.skills.markdown import parse_skill_md
from stargraph.tools import Arbiter
from tests.skills.markdown.test_skillmd_running import (  # noqa: F401 -- fixtures
    ARCHIVE,
    arbiter,
    run,
    workspace,
)


def test_issue44_skillmd_failures_end_halted_success_done(tmp_path: Path, arbiter: Arbiter) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    _, ok = run(parse_skill_md(ARCHIVE), arbiter, store, "ok")
    bad_check = parse_skill_md(ARCHIVE.replace("contains: hello}", "contains: goodbye}"))
    _, checked = run(bad_check, arbiter, store, "bad")
    bad_step = parse_skill_md(ARCHIVE.replace("{path: notes.txt}", "{path: missing.txt}"))
    _, failed = run(bad_step, arbiter, store, "fail")
    store.close()
    assert (ok.status, ok.stopped_by) == ("done", None)
    assert (checked.status, checked.stopped_by, checked.stop_reason) == (
        "halted",
        "workflow/verification_failed",
        "verification_failed",
    )
    assert (failed.status, failed.stopped_by, failed.stop_reason) == (
        "halted",
        "workflow/step_failed",
        "step_failed",
    )
