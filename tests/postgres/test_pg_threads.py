"""Threads on PostgreSQL: a conversation of three turns, and a schema-2 database (written
before threads) that is migrated and then takes threads."""

from __future__ import annotations

import psycopg
import pytest

from stargraph.checkpoint import PostgresStore
from stargraph.checkpoint._postgres import _MIGRATIONS, SCHEMA_VERSION
from stargraph.checkpoint.conformance import make_run, make_step
from tests.runtime import threadgraph

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)


def test_a_thread_of_three_turns_on_postgres(pg_dsn: str, pg_schema: str) -> None:
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        app = threadgraph.app(store)
        for text in ("one", "two", "three"):
            final = app.invoke({"messages": [text]}, thread_id="chat")
        assert final.messages[::2] == ["one", "two", "three"]
        runs = app.get_thread("chat")
        assert [(r.turn, r.status) for r in runs] == [(1, "done"), (2, "done"), (3, "done")]
        assert app.replay(runs[1].run_id) == app.get_state(runs[1].run_id)
        assert [r.run_id for r in app.threads()] == [runs[2].run_id]


def test_a_schema_2_database_is_migrated_and_takes_threads(pg_dsn: str, pg_schema: str) -> None:
    s = f'"{pg_schema}"'
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(f"CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL)")
        for sql in (*_MIGRATIONS[0], *_MIGRATIONS[1]):
            conn.execute(sql.format(s=s))
        conn.execute(f"INSERT INTO {s}.meta VALUES ('schema_version', '2')")
        conn.execute(
            f"INSERT INTO {s}.runs VALUES ('r1', 'g', 'sha256:a', 'sha256:b', 'done', 0, "
            "NULL, NULL, '2024-01-01T00:00:00+00:00', '2024-01-01T00:00:00+00:00', NULL, "
            "NULL, NULL, NULL)"
        )
        conn.execute(
            f"INSERT INTO {s}.steps VALUES ('r1', 0, true, %s, NULL)",
            (make_step(0).model_dump_json(exclude_defaults=True).encode(),),
        )
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        assert store.schema_version() == SCHEMA_VERSION == 5
        old = store.get_run("r1")
        assert (old.status, old.thread_id, old.turn) == ("done", None, None)
        assert store.get_steps("r1") == [make_step(0)]
        store.create_run(make_run("t1", thread_id="t", turn=1), make_step(0))
        assert [r.run_id for r in store.get_thread("t")] == ["t1"]
        assert [r.run_id for r in store.list_threads()] == ["t1"]
    with PostgresStore(pg_dsn, schema=pg_schema) as again:  # reopening migrates nothing
        assert again.schema_version() == SCHEMA_VERSION
