"""PostgresStore beyond the conformance suite: connection errors, migrations, the pool, and
what issue 25 asked of every store (float specials, checksums, one owner per run)."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from stargraph.checkpoint import MemoryStore, PostgresStore, SqliteStore
from stargraph.checkpoint._postgres import SCHEMA_VERSION, redact
from stargraph.checkpoint.conformance import make_run, make_step
from stargraph.errors import CheckpointError
from stargraph.graph import END, START, Graph

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)

SECRET = "s3cr3t-pa55"


def _closed_port() -> int:
    from tests.postgres import pgcluster

    return pgcluster.free_port()


def test_unreachable_server_names_the_host_not_the_password() -> None:
    port = _closed_port()
    dsn = f"postgresql://alice:{SECRET}@127.0.0.1:{port}/runs"
    with pytest.raises(CheckpointError) as info:
        PostgresStore(dsn, connect_timeout_s=2)
    text = str(info.value)
    assert f"127.0.0.1:{port}/runs" in text
    assert "alice" in text
    assert SECRET not in text
    assert SECRET not in repr(info.value.__cause__ or "")


def test_unknown_host_names_it() -> None:
    dsn = f"host=no-such-host.invalid port=5432 user=bob password={SECRET} dbname=x"
    with pytest.raises(CheckpointError, match=r"no-such-host\.invalid:5432") as info:
        PostgresStore(dsn, connect_timeout_s=2)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    "dsn",
    [
        f"postgresql://carol:{SECRET}@127.0.0.1:notaport/db",
        f"this is not = a {SECRET} connection string",
        f"postgresql://dave:{SECRET}@[::1/db",
    ],
)
def test_malformed_connection_string_is_a_typed_error_without_the_password(dsn: str) -> None:
    with pytest.raises(CheckpointError) as info:
        PostgresStore(dsn, connect_timeout_s=2)
    assert SECRET not in str(info.value)


def test_missing_database_names_host_and_database(pg_cluster: object) -> None:
    port = pg_cluster.port  # type: ignore[attr-defined]
    dsn = f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/no_such_db"
    with pytest.raises(CheckpointError, match=rf"127\.0\.0\.1:{port}/no_such_db") as info:
        PostgresStore(dsn)
    assert SECRET not in str(info.value)


def test_redact() -> None:
    assert redact(f"postgresql://u:{SECRET}@h/db") == "postgresql://u:***@h/db"
    assert redact(f"host=h password={SECRET} user=u") == "host=h password=*** user=u"
    assert redact(f"x {SECRET} y", SECRET) == "x *** y"


def test_bad_schema_name_and_pool_size(pg_dsn: str) -> None:
    with pytest.raises(CheckpointError, match="schema name"):
        PostgresStore(pg_dsn, schema='x"; DROP TABLE y; --')
    with pytest.raises(CheckpointError, match="pool_size"):
        PostgresStore(pg_dsn, pool_size=0)


def test_migration_is_versioned_and_idempotent(pg_dsn: str, pg_schema: str) -> None:
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        assert store.schema_version() == SCHEMA_VERSION
        store.create_run(make_run("r1"), make_step(0))
    with PostgresStore(pg_dsn, schema=pg_schema) as store:  # opening again changes nothing
        assert store.schema_version() == SCHEMA_VERSION
        assert [r.run_id for r in store.list_runs()] == ["r1"]


def test_concurrent_first_opens_migrate_once(pg_dsn: str, pg_schema: str) -> None:
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def open_store() -> None:
        barrier.wait()
        try:
            PostgresStore(pg_dsn, schema=pg_schema).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        assert store.schema_version() == SCHEMA_VERSION


def test_newer_schema_is_refused(pg_dsn: str, pg_schema: str) -> None:
    PostgresStore(pg_dsn, schema=pg_schema).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE \"{pg_schema}\".meta SET value = '99'")
    with pytest.raises(CheckpointError, match="schema version 99"):
        PostgresStore(pg_dsn, schema=pg_schema)


def test_a_missing_run_names_the_schema_and_server_on_every_path(
    pg_dsn: str, pg_schema: str
) -> None:
    # A read, a status change and a step commit (whose fence reads the row after) name the
    # same place: the schema, and the server without its password.
    from stargraph.errors import RunNotFoundError

    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        place = rf"^no run 'ghost' in PostgreSQL schema {pg_schema} at [^;]+; list runs with "
        calls: list[Any] = [
            lambda: store.get_run("ghost"),
            lambda: store.set_status("ghost", "done"),
            lambda: store.commit_step("ghost", make_step(1)),
        ]
        for call in calls:
            with pytest.raises(RunNotFoundError, match=place):
                call()


def test_corrupt_payload_is_a_corrupt_checkpoint_error(pg_dsn: str, pg_schema: str) -> None:
    from stargraph.errors import CorruptCheckpointError

    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        store.create_run(make_run("r1"), make_step(0))
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE \"{pg_schema}\".steps SET payload = 'not json'::bytea")
        with pytest.raises(CorruptCheckpointError, match="r1") as info:
            store.get_steps("r1")
        assert info.value.step == 0


def test_closed_store_refuses_and_close_twice_is_safe(pg_dsn: str, pg_schema: str) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema)
    store.close()
    store.close()
    with pytest.raises(CheckpointError, match="closed"):
        store.get_run("r1")


def test_server_side_error_is_typed_and_the_pool_recovers(pg_dsn: str, pg_schema: str) -> None:
    with PostgresStore(pg_dsn, schema=pg_schema, pool_size=1) as store:
        store.create_run(make_run("r1"), make_step(0))
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'stargraph' AND pid <> pg_backend_pid()"
            )
        # The pooled connection is dead: one typed error, then a fresh connection works.
        errors = []
        try:
            store.get_run("r1")
        except CheckpointError as exc:
            errors.append(str(exc))
        assert all("127.0.0.1" in e for e in errors), errors
        assert store.get_run("r1").run_id == "r1"


# --------------------------------------------------------------------------- issue 25


def test_a_schema_1_database_is_migrated_and_its_rows_still_read(
    pg_dsn: str, pg_schema: str
) -> None:
    """Rows written before checksums and leases (schema 1) read back unverified; new rows
    carry a checksum."""
    from stargraph.checkpoint._postgres import _MIGRATIONS

    s = f'"{pg_schema}"'
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(f"CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL)")
        for sql in _MIGRATIONS[0]:
            conn.execute(sql.format(s=s))
        conn.execute(f"INSERT INTO {s}.meta VALUES ('schema_version', '1')")
        conn.execute(
            f"INSERT INTO {s}.runs VALUES ('r1', 'g', 'sha256:a', 'sha256:b', 'running', 0, "
            "NULL, NULL, '2024-01-01T00:00:00+00:00', '2024-01-01T00:00:00+00:00', NULL)"
        )
        conn.execute(
            f"INSERT INTO {s}.steps VALUES ('r1', 0, true, %s)",
            (make_step(0).model_dump_json(exclude_defaults=True).encode(),),
        )
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        assert store.schema_version() == SCHEMA_VERSION == 5
        assert store.get_steps("r1") == [make_step(0)]
        assert store.get_run("r1").owner is None
        store.commit_step("r1", make_step(1))
        assert store.get_steps("r1") == [make_step(0), make_step(1)]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        crcs = conn.execute(f"SELECT step, crc FROM {s}.steps ORDER BY step").fetchall()
    assert crcs[0] == (0, None)
    assert crcs[1][1] is not None


def test_a_damaged_step_row_fails_its_checksum(pg_dsn: str, pg_schema: str) -> None:
    from stargraph.errors import CorruptCheckpointError

    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        store.create_run(make_run("r1"), make_step(0))
        store.commit_step("r1", make_step(1))
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # Still valid JSON of the right shape: only the checksum can tell.
            conn.execute(
                f'UPDATE "{pg_schema}".steps SET payload = '
                "convert_to(replace(convert_from(payload, 'UTF8'), '\"x\":1', '\"x\":7'), "
                "'UTF8') WHERE step = 1"
            )
        with pytest.raises(CorruptCheckpointError, match=r"run 'r1' step 1.*checksum") as info:
            store.get_steps("r1")
        assert (info.value.run_id, info.value.step) == ("r1", 1)
        assert store.get_steps("r1", end=0) == [make_step(0)]


class Specials(BaseModel):
    x: float = 0.0
    maybe: float | None = 0.0
    loose: Any = None
    n: int = 0


def write_specials(state: Specials) -> dict[str, Any]:
    return {"x": math.nan, "maybe": -math.inf, "loose": [math.nan, {"i": math.inf}, -0.0]}


def _specials_app(store: Any) -> Any:
    return (
        Graph("specials", state=Specials)
        .with_node("write", write_specials, interrupt_after=True)
        .with_node("bump", hooked_bump)
        .with_edge(START, "write")
        .with_edge("write", "bump")
        .with_edge("bump", END)
        .compile(store=store)
    )


def test_nan_and_infinities_agree_across_memory_sqlite_and_postgres(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    """Issue 25 item 3: after a node writes NaN/-inf, get_state and resume work on every
    store and agree."""
    from stargraph.checkpoint.conformance import same_value

    seen = []
    stores = (
        MemoryStore(),
        SqliteStore(tmp_path / "sg.db"),
        PostgresStore(pg_dsn, schema=pg_schema),
    )
    for store in stores:
        app = _specials_app(store)
        app.invoke({}, run_id="r")
        seen.append((app.get_state("r").model_dump(), app.resume("r").model_dump()))
        store.close()
    expected = {"x": math.nan, "maybe": -math.inf, "loose": [math.nan, {"i": math.inf}, -0.0]}
    for state, final in seen:
        assert same_value({k: state[k] for k in expected}, expected), state
        assert same_value({k: final[k] for k in expected}, expected), final
        assert final["n"] == 1
    assert same_value(seen[0], seen[1])
    assert same_value(seen[0], seen[2])


def test_a_second_resumer_is_refused_on_postgres(pg_dsn: str, pg_schema: str) -> None:
    """Issue 25 item 9 on PostgreSQL: the loser gets RunBusyError before any node runs, and
    the winner's interrupt stands."""
    from stargraph.errors import RunBusyError

    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        app = _specials_app(store)
        app.invoke({}, run_id="r")
        assert app.get_run("r").status == "interrupted"

        def bump() -> None:
            ran.append("bump")
            entered.set()
            release.wait(60)

        RESUME_HOOK.append(bump)
        try:
            box: dict[str, Any] = {}
            first = threading.Thread(target=lambda: box.update(final=app.resume("r")))
            first.start()
            assert entered.wait(60)
            assert app.get_run("r").status == "running"
            with pytest.raises(RunBusyError, match=r"run 'r' is being run by"):
                app.resume("r")
            assert ran == ["bump"]
            release.set()
            first.join(60)
        finally:
            RESUME_HOOK.clear()
            release.set()
        assert box["final"].n == 1
        assert app.get_run("r").status == "done"
        assert ran == ["bump"]


RESUME_HOOK: list[Any] = []


def hooked_bump(state: Specials) -> dict[str, Any]:
    for hook in RESUME_HOOK:
        hook()
    return {"n": state.n + 1}
