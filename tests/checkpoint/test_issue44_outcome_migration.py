"""An SQLite file written before honest outcomes (schema 5) opens: its runs a halt rule
stopped, stored ``done`` then, read ``halted``; those the shipped success rule ended, or
that reached END, stay ``done``; other rows are left as they were."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

from stargraph.checkpoint import SqliteStore
from stargraph.checkpoint._sqlite import SCHEMA_VERSION
from stargraph.checkpoint.conformance import make_run, make_step


def _old_file(path: Path) -> None:
    """A file as schema 5 left it: every rule-ended run ``done`` with its rule."""
    with SqliteStore(path) as store:
        for run_id in ("budget", "guard", "success", "plain", "cancelled", "waiting"):
            store.create_run(make_run(run_id), make_step(0))
        store.set_status("budget", "done", stopped_by="termination/error_budget")
        store.set_status("guard", "done", stopped_by="guard/blocked")
        store.set_status("success", "done", stopped_by="termination/done")
        store.set_status("plain", "done")
        store.set_status("cancelled", "cancelled", stopped_by="SIGINT")
        store.set_status("waiting", "interrupted", interrupt={"x": math.nan})
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")


def test_issue44_schema_5_file_migrates_rule_ended_runs_to_halted(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_file(path)
    with SqliteStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION == 6
        status = {r.run_id: (r.status, r.stopped_by) for r in store.list_runs()}
        assert status == {
            "budget": ("halted", "termination/error_budget"),
            "guard": ("halted", "guard/blocked"),
            "success": ("done", "termination/done"),
            "plain": ("done", None),
            "cancelled": ("cancelled", "SIGINT"),
            "waiting": ("interrupted", None),
        }
        assert store.get_run("budget").stop_reason is None  # never recorded on the row
        assert math.isnan(store.get_run("waiting").interrupt["x"])
        assert [r.run_id for r in store.list_runs(status="halted")] == ["guard", "budget"]
    with SqliteStore(path) as again:  # reopening migrates nothing twice
        assert again.get_run("budget").status == "halted"
