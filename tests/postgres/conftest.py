"""A real PostgreSQL server on 127.0.0.1 for the session (see ``pgcluster``).

``pg_cluster`` starts it once; ``pg_dsn`` is its superuser DSN; ``pg_schema`` gives each test
a fresh schema name and drops it afterwards. A server that cannot start fails the tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.postgres import pgcluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pgcluster.Cluster]:
    with pgcluster.running_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def pg_dsn(pg_cluster: pgcluster.Cluster) -> str:
    return pg_cluster.dsn


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
