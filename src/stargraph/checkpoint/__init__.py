"""Checkpoint stores: every step of a run, durably, so it can resume after a crash.

``MemoryStore`` for tests, ``SqliteStore`` (the embedded default, ``.stargraph/stargraph.db``)
for one machine, ``PostgresStore`` for several; all pass the shared conformance suite in
``stargraph.checkpoint.conformance``. A run has one owner at a time (a lease with
heartbeats, :class:`RunOwner`); a run whose owner is gone is reported as ``orphaned``.
:func:`watch_runs` waits for a run to change (``PostgresStore`` tells at once, through
``LISTEN``/``NOTIFY``; other stores are polled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stargraph import _lazy
from stargraph.checkpoint import _records
from stargraph.checkpoint._memory import MemoryStore
from stargraph.checkpoint._protocol import CheckpointStore, StoreFeature
from stargraph.checkpoint._recording import Recording
from stargraph.checkpoint._records import *

if TYPE_CHECKING:
    from stargraph.checkpoint._postgres import PostgresStore
    from stargraph.checkpoint._sqlite import SqliteStore
    from stargraph.checkpoint._watch import PollingWatch, RunWatch, WatchableStore, watch_runs

__all__ = [
    "CheckpointStore",
    "MemoryStore",
    "PollingWatch",
    "PostgresStore",
    "Recording",
    "RunWatch",
    "SqliteStore",
    "StoreFeature",
    "WatchableStore",
    "watch_runs",
]
# The record types are listed once, in _records.__all__.
__all__ += _records.__all__
__all__.sort()


# The stores are imported when first read: a run in memory, a replay or a reader of records
# does not import SQLite, the journal files or asyncio's watchers; PostgresStore needs the
# optional psycopg extra besides.
__getattr__, __dir__ = _lazy.exports(
    __name__,
    {
        "PollingWatch": "._watch",
        "PostgresStore": "._postgres",
        "RunWatch": "._watch",
        "SqliteStore": "._sqlite",
        "WatchableStore": "._watch",
        "watch_runs": "._watch",
    },
)
