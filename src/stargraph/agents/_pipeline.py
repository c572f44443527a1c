"""The task pipeline between a parent and its sub-agents: a bounded queue per agent type and
the notifications a parent receives when one of its agents ends.

Both live in the agent store's SQLite file, written in the transaction of the move they
belong to, so a crash never loses a queued task or a notification, and never keeps a slot
that an ended agent held:

* ``task_queue``: tasks submitted while their agent type had no free slot
  (``limits.max_concurrent_tasks``), at most ``limits.queue_depth`` per type. When an agent of
  the type ends, the oldest queued task of that type gets an agent in the same transaction.
* ``notifications``: one row per ended agent that has a parent, read by the parent with
  :meth:`AgentStore.notifications <stargraph.agents.AgentStore.notifications>` (or waited on
  with :meth:`~stargraph.agents.AgentStore.wait_notification`) from a cursor it keeps, so a
  parent that restarts reads on from where it was.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from pydantic import ConfigDict

from stargraph._typed import TypedModel
from stargraph.agents._profile import AgentProfile, TaskNeeds
from stargraph.errors import AgentConfigError, AgentQueueFullError

__all__ = ["Notification", "QueuedTask", "SCHEMA"]

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS task_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, agent_type TEXT NOT NULL, profile TEXT NOT NULL,
    needs TEXT NOT NULL, parent TEXT, at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS agent_parents (
    agent_id TEXT PRIMARY KEY, parent TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notifications (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, parent TEXT NOT NULL, agent_id TEXT NOT NULL,
    task_id TEXT, status TEXT NOT NULL, summary TEXT, error TEXT, at_ms INTEGER NOT NULL);
"""
"""The pipeline's tables, created beside the agent store's own."""


class QueuedTask(TypedModel):
    """A task waiting in the queue of its agent type for a free slot."""

    typed_error = AgentConfigError

    model_config = ConfigDict(frozen=True)

    seq: int
    """Its place in the store's queue (lower is served first)."""
    profile: AgentProfile
    """The profile its agent will be allocated under."""
    needs: TaskNeeds
    """The task."""
    parent: str | None
    """The parent workflow its agent will notify when it ends."""


class Notification(TypedModel):
    """What a parent receives when one of its agents ends (``TERMINATED`` or ``FAILED``)."""

    typed_error = AgentConfigError

    model_config = ConfigDict(frozen=True)

    seq: int
    """Position in the store's notifications; pass the last one seen as ``after``."""
    parent: str
    """The parent workflow notified."""
    agent_id: str
    """The agent that ended; its slot in the pool is free again."""
    task_id: str | None
    """The task it ran."""
    status: str
    """The terminal state it reached."""
    summary: str | None
    """The summary of its last ``task_update``, if it wrote one."""
    error: str | None
    """Why it failed, if it did."""


_NOTIFICATION_COLUMNS: Final = (
    "seq",
    "parent",
    "agent_id",
    "task_id",
    "status",
    "summary",
    "error",
)


def queue_full(profile: AgentProfile, waiting: int) -> AgentQueueFullError:
    """The refusal of a task for ``profile``, whose slots are taken and whose queue holds
    ``waiting`` tasks: it names the type and both limits, and what to change."""
    limits = profile.limits
    return AgentQueueFullError(
        f"agent type {profile.agent_type!r} is full: limits.max_concurrent_tasks="
        f"{limits.max_concurrent_tasks} agents are live and its queue holds {waiting} tasks "
        f"(limits.queue_depth={limits.queue_depth}); wait for an agent to end, or raise "
        "limits.max_concurrent_tasks or limits.max_queued_tasks",
        agent_type=profile.agent_type,
        queue_depth=limits.queue_depth,
    )


def queue_length(conn: sqlite3.Connection, agent_type: str) -> int:
    """Tasks waiting for ``agent_type``."""
    row = conn.execute("SELECT COUNT(*) FROM task_queue WHERE agent_type = ?", (agent_type,))
    return int(row.fetchone()[0])


def enqueue(
    conn: sqlite3.Connection,
    profile: AgentProfile,
    needs: TaskNeeds,
    parent: str | None,
    at_ms: int,
) -> QueuedTask:
    """Append ``needs`` to its type's queue."""
    cursor = conn.execute(
        "INSERT INTO task_queue (agent_type, profile, needs, parent, at_ms) VALUES (?, ?, ?, ?, ?)",
        (profile.agent_type, profile.model_dump_json(), needs.model_dump_json(), parent, at_ms),
    )
    assert cursor.lastrowid is not None
    return QueuedTask(seq=cursor.lastrowid, profile=profile, needs=needs, parent=parent)


def pop(conn: sqlite3.Connection, agent_type: str) -> QueuedTask | None:
    """Take the oldest task queued for ``agent_type`` off the queue."""
    row = conn.execute(
        "SELECT seq, profile, needs, parent FROM task_queue WHERE agent_type = ? "
        "ORDER BY seq LIMIT 1",
        (agent_type,),
    ).fetchone()
    if row is None:
        return None
    conn.execute("DELETE FROM task_queue WHERE seq = ?", (row[0],))
    return _queued(row)


def queued(conn: sqlite3.Connection, agent_type: str | None) -> list[QueuedTask]:
    """The queue (of one type, or all), oldest first."""
    rows = conn.execute(
        "SELECT seq, profile, needs, parent FROM task_queue "
        "WHERE ? IS NULL OR agent_type = ? ORDER BY seq",
        (agent_type, agent_type),
    ).fetchall()
    return [_queued(r) for r in rows]


def _queued(row: tuple[int, str, str, str | None]) -> QueuedTask:
    return QueuedTask(
        seq=row[0],
        profile=AgentProfile.model_validate_json(row[1]),
        needs=TaskNeeds.model_validate_json(row[2]),
        parent=row[3],
    )


def set_parent(conn: sqlite3.Connection, agent_id: str, parent: str) -> None:
    """Record that ``agent_id`` reports to ``parent``."""
    conn.execute("INSERT INTO agent_parents VALUES (?, ?)", (agent_id, parent))


def parent_of(conn: sqlite3.Connection, agent_id: str) -> str | None:
    """The parent ``agent_id`` reports to, if any."""
    row = conn.execute(
        "SELECT parent FROM agent_parents WHERE agent_id = ?", (agent_id,)
    ).fetchone()
    return None if row is None else str(row[0])


def notify(conn: sqlite3.Connection, parent: str, agent_id: str, at_ms: int) -> None:
    """Tell ``parent`` that ``agent_id`` ended, with its task, state, error and last
    summary as they stand in this transaction."""
    conn.execute(
        "INSERT INTO notifications (parent, agent_id, task_id, status, summary, error, at_ms) "
        "SELECT ?, a.id, a.task_id, a.status, (SELECT summary FROM task_updates "
        "WHERE agent_id = a.id ORDER BY id DESC LIMIT 1), a.error, ? FROM agents a "
        "WHERE a.id = ?",
        (parent, at_ms, agent_id),
    )


def notifications(conn: sqlite3.Connection, parent: str, after: int) -> list[Notification]:
    """``parent``'s notifications after ``seq`` ``after``, oldest first."""
    rows = conn.execute(
        f"SELECT {', '.join(_NOTIFICATION_COLUMNS)} FROM notifications "
        "WHERE parent = ? AND seq > ? ORDER BY seq",
        (parent, after),
    ).fetchall()
    return [Notification(**dict(zip(_NOTIFICATION_COLUMNS, r, strict=True))) for r in rows]
