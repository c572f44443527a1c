"""Run workers: processes that claim queued runs under a lease and run them durably.

``submit(db, "pkg.module:graph", input)`` queues a run; ``Worker(db).run()`` (or
``python -m stargraph.workers --db postgresql://...``) claims runs with
``SELECT ... FOR UPDATE SKIP LOCKED`` plus a lease and heartbeats, woken by LISTEN/NOTIFY on
PostgreSQL; on SQLite several processes of one machine share the queue with
``BEGIN IMMEDIATE`` claims. A worker that dies loses its lease and another resumes the run
from its last checkpoint; a run that keeps killing its workers is dead-lettered. Graphs that
need a model or an arbiter get them from ``Worker(db, services=...)`` (a mapping, or a
function returning one that each worker process calls once).
"""

from __future__ import annotations

from stargraph.workers._queue import (
    Claim,
    PostgresQueue,
    QueueItem,
    QueueStatus,
    RunQueue,
    SqliteQueue,
    open_queue,
)
from stargraph.workers._worker import (
    LeaseLostError,
    Outcome,
    Services,
    Worker,
    load_graph,
    load_services,
    submit,
)

__all__ = [
    "Claim",
    "LeaseLostError",
    "Outcome",
    "PostgresQueue",
    "QueueItem",
    "QueueStatus",
    "RunQueue",
    "Services",
    "SqliteQueue",
    "Worker",
    "load_graph",
    "load_services",
    "open_queue",
    "submit",
]
