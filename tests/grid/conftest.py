"""The PostgreSQL server of the grid's ``postgres`` cells, started once for the session
(``tests/postgres/pgcluster.py``) on first use, so the memory/SQLite half never starts it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.grid.cells import Forker
from tests.postgres import pgcluster


@pytest.fixture(scope="session")
def grid_forker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forker]:
    """The process the killed children of this pytest process are forked from."""
    forker = Forker(tmp_path_factory.mktemp("forker"))
    yield forker
    forker.close()


@pytest.fixture(scope="session")
def grid_pg_dsn() -> Iterator[str]:
    """The superuser DSN of a throwaway server."""
    with pgcluster.running_cluster() as cluster:
        yield cluster.dsn


@pytest.fixture
def grid_pg_schema(grid_pg_dsn: str) -> Iterator[str]:
    """A fresh schema name, dropped after the test."""
    import psycopg

    name = f"g_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(grid_pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
