"""Honest outcomes on PostgreSQL: a schema-4 database opens with its rule-halted runs read
``halted`` (the conformance suite holds the new statuses themselves)."""

from __future__ import annotations

import math

import psycopg
import pytest

from stargraph.checkpoint import PostgresStore
from stargraph.checkpoint._postgres import SCHEMA_VERSION
from stargraph.checkpoint.conformance import make_run, make_step

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)


def test_issue44_schema_4_database_migrates_rule_ended_runs_to_halted(
    pg_dsn: str, pg_schema: str
) -> None:
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        for run_id in ("budget", "success", "plain", "cancelled", "waiting"):
            store.create_run(make_run(run_id), make_step(0))
        store.set_status("budget", "done", stopped_by="termination/error_budget")
        store.set_status("success", "done", stopped_by="termination/done")
        store.set_status("plain", "done")
        store.set_status("cancelled", "cancelled", stopped_by="SIGINT")
        store.set_status("waiting", "interrupted", interrupt={"x": math.nan})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE \"{pg_schema}\".meta SET value = '4' WHERE key = 'schema_version'")
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        assert store.schema_version() == SCHEMA_VERSION == 5
        status = {r.run_id: (r.status, r.stopped_by) for r in store.list_runs()}
        assert status == {
            "budget": ("halted", "termination/error_budget"),
            "success": ("done", "termination/done"),
            "plain": ("done", None),
            "cancelled": ("cancelled", "SIGINT"),
            "waiting": ("interrupted", None),
        }
        assert math.isnan(store.get_run("waiting").interrupt["x"])
