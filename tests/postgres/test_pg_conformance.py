"""The shared ``CheckpointStore`` conformance suite on ``PostgresStore`` (a real server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stargraph.checkpoint import PostgresStore
from stargraph.checkpoint.conformance import CheckpointStoreConformance

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)


class TestPostgresStore(CheckpointStoreConformance):
    @pytest.fixture
    def store(self, pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
        store = PostgresStore(pg_dsn, schema=pg_schema)
        yield store
        store.close()


class TestPostgresStoreReopened(CheckpointStoreConformance):
    """Same semantics through a store opened over an existing, already migrated schema,
    with a pool of one connection (every thread queues on it)."""

    @pytest.fixture
    def store(self, pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
        PostgresStore(pg_dsn, schema=pg_schema).close()
        store = PostgresStore(pg_dsn, schema=pg_schema, pool_size=1)
        yield store
        store.close()
