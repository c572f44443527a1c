"""Replay's ``stub`` on PostgreSQL: the plan lists the re-run nodes, a stubbed replay (child
run and ``Send`` tasks included) leaves their file alone and ends in the recorded state."""

from __future__ import annotations

from pathlib import Path

import pytest

from stargraph.checkpoint import PostgresStore
from tests.replay.effectgraph import effects, lines

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)


def test_issue44_a_stubbed_replay_on_postgres_leaves_the_file_alone(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        app = effects().compile(store=store)
        final = app.invoke({"ledger": str(ledger), "items": ["a", "b"]}, run_id="r")
        written = lines(ledger)
        assert app.replay_plan("r").reruns == ("record", "touch", "audit/stamp")
        assert app.replay("r", stub="all") == final
        assert app.replay("r", stub={"record", "touch", "audit/stamp"}) == final
        assert lines(ledger) == written
        assert app.replay("r", stub="must") == final
        assert lines(ledger) == sorted(written + written)
