"""PostgresStore beyond the conformance suite: connection errors, migrations, the pool."""

from __future__ import annotations

import threading

import psycopg
import pytest

from stargraph.checkpoint import PostgresStore
from stargraph.checkpoint._postgres import SCHEMA_VERSION, redact
from stargraph.checkpoint.conformance import make_run, make_step
from stargraph.errors import CheckpointError

SECRET = "s3cr3t-pa55"


def _closed_port() -> int:
    import pgcluster

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
