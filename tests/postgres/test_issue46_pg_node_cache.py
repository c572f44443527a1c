"""Node cache entries live in the PostgreSQL store's schema, shared by its store objects."""

from __future__ import annotations

import pytest

from stargraph.checkpoint import PostgresStore
from tests.runtime.cachenodes import CALLS, cached_graph

pytestmark = pytest.mark.postgres


def test_issue46_pg_cache_entries_outlive_the_store_object(pg_dsn: str, pg_schema: str) -> None:
    CALLS.clear()
    for _ in range(2):
        with PostgresStore(pg_dsn, schema=pg_schema) as store:
            app = cached_graph(ttl_s=3600).compile(store=store)
            assert app.invoke({"question": "why"}).answer == "why? 1"
    assert CALLS == ["why"]
    CALLS.clear()
