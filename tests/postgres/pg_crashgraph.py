"""``crashgraph`` on PostgreSQL: the same graphs and crash points, a ``PostgresStore``.

``python -c "from tests.postgres import pg_crashgraph; pg_crashgraph.main()" DSN SCHEMA LEDGER
RUN_ID SHAPE`` (from the repository root)
runs (or resumes) one run to its end and prints the final state as JSON; ``SG_CRASH_AT``
works as in ``crashgraph`` (``during_commit`` leaves an open transaction that wrote the step
row when the process dies).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from stargraph.checkpoint import PostgresStore, StepRecord
from tests import crashgraph


class CrashingPgStore(PostgresStore):
    """A PostgresStore that dies inside or right after the commit of a chosen step."""

    def commit_step(self, run_id: str, step: StepRecord, **kwargs: Any) -> None:
        """Commit, dying at the configured point."""
        if crashgraph._crash_point() == ("during_commit", step.step):
            conn = self.connect()
            conn.execute("BEGIN")
            conn.execute(
                f'INSERT INTO "{self.schema}".steps (run_id, step, has_snapshot, payload) '
                "VALUES (%s, %s, false, %s)",
                (run_id.encode(), step.step, b"{}"),
            )
            os._exit(137)
        super().commit_step(run_id, step, **kwargs)
        crashgraph._maybe_crash("after_commit", step.step)


def main() -> None:
    """Run or resume ``RUN_ID`` to its end; print the final state as JSON."""
    dsn, schema, ledger, run_id, shape = sys.argv[1:6]
    os.environ["SG_LEDGER"] = ledger
    graph = crashgraph.SHAPES[shape]()
    store = CrashingPgStore(dsn, schema=schema, pool_size=4)
    app = graph.compile(store=store)
    try:
        try:
            status = app.get_run(run_id).status
        except LookupError:
            status = None
        if status is None:
            final = app.invoke({}, run_id=run_id)
        elif status == "done":
            final = app.get_state(run_id)
        else:
            final = app.resume(run_id)
        print(json.dumps(final.model_dump()))
    finally:
        app.close()
        store.close()
