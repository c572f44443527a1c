"""Agents in SQLite: ``agents``, ``audit_log`` (hash-chained), ``thought_records``.

Every state change is one transaction that updates the ``agents`` row and appends an
``audit_log`` row. The audit chain is the arbiter's commit-log chain (the same
``seal`` / ``verify_rows``): each row stores a sealed ``CommitEntry(kind="audit")`` whose
``args_hash`` is the sha256 of the row's readable columns, so editing a column, a record, or
deleting a row is caught by :meth:`AgentStore.verify_chain`, which returns the first broken
``seq``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from stargraph._lifecycle import Closing
from stargraph._sqlite import Database, Doing
from stargraph._typed import TypedModel
from stargraph.agents import _pipeline, _writeback
from stargraph.agents._data import config_error
from stargraph.agents._lifecycle import DEFAULT_LIFECYCLE, Lifecycle
from stargraph.agents._pipeline import Notification, QueuedTask
from stargraph.agents._pool import PoolStrategy, Strategy, plan
from stargraph.agents._profile import AgentProfile, TaskNeeds
from stargraph.agents._spawn import PoolAssignment, SpawnParams, WritebackContract
from stargraph.agents._writeback import AgentEvent, TaskUpdate, ThoughtRecord, WritebackMode
from stargraph.errors import (
    AgentConfigError,
    LifecycleError,
    Problem,
    WaitTimeoutError,
)
from stargraph.ir import canonical_json
from stargraph.tools import GENESIS_HASH, CommitEntry, seal, sha256_hex, verify_rows

__all__ = ["AgentRecord", "AgentStore", "AuditRow"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS agents (
    id TEXT PRIMARY KEY, agent_type TEXT NOT NULL, pool TEXT, task_id TEXT,
    status TEXT NOT NULL, profile TEXT NOT NULL, error TEXT,
    created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS audit_log (
    seq INTEGER PRIMARY KEY, agent_id TEXT NOT NULL, action TEXT NOT NULL,
    from_state TEXT, to_state TEXT, at_ms INTEGER NOT NULL, detail TEXT NOT NULL,
    record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS thought_records (
    id INTEGER PRIMARY KEY AUTOINCREMENT, agent_id TEXT NOT NULL, task_id TEXT NOT NULL,
    type TEXT NOT NULL, branch TEXT NOT NULL, commit_sha TEXT NOT NULL,
    tests_run TEXT NOT NULL, blockers TEXT NOT NULL, at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS spawns (
    agent_id TEXT PRIMARY KEY, params TEXT NOT NULL, at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS task_updates (
    id INTEGER PRIMARY KEY AUTOINCREMENT, agent_id TEXT NOT NULL, task_id TEXT NOT NULL,
    status TEXT NOT NULL, progress INTEGER NOT NULL, summary TEXT NOT NULL,
    at_ms INTEGER NOT NULL);
"""
_AUDIT_COLUMNS: Final = ("agent_id", "action", "from_state", "to_state", "at_ms", "detail")
_AUDIT_ROW_COLUMNS: Final = ("seq", *_AUDIT_COLUMNS)
_THOUGHT_COLUMNS: Final = ("task_id", "type", "branch", "commit_sha", "tests_run", "blockers")
_JSON_COLUMNS: Final = frozenset({"detail", "tests_run", "blockers"})


class AgentRecord(TypedModel):
    """One row of ``agents``."""

    typed_error = AgentConfigError

    model_config = ConfigDict(frozen=True)

    id: str
    """Agent id."""
    agent_type: str
    """The profile's type."""
    pool: str | None
    """Pool assignment (research, implementation ...)."""
    task_id: str | None
    """The task it was allocated or assigned for."""
    status: str
    """Lifecycle state."""
    profile: AgentProfile
    """The capability profile it runs under."""
    error: str | None
    """Why it failed, if it did."""
    spawn: SpawnParams | None = None
    """The parameters it was spawned with (``None`` before spawning, or when spawned
    without any)."""


class AuditRow(TypedModel):
    """One row of ``audit_log`` (its chain record left out)."""

    typed_error = AgentConfigError

    model_config = ConfigDict(frozen=True)

    seq: int
    """1-based position in the chain."""
    agent_id: str
    """The agent."""
    action: str
    """``allocate``, a lifecycle event (``spawn``, ``fail`` ...), ``task_update``,
    ``thought_record``, ``memory_pack`` or ``orphan``."""
    from_state: str | None
    """State before (lifecycle rows)."""
    to_state: str | None
    """State after (lifecycle rows)."""
    at_ms: int
    """When, in ms since the epoch (injected clock)."""
    detail: dict[str, Any]
    """Specifics (reason, missing tools ...)."""


class AgentStore(Closing):
    """Agents, their lifecycle and audit trail in one SQLite file (stdlib ``sqlite3``).

    ``writeback`` is the enforcement of the writeback contract at termination;
    ``on_event`` receives alerts (pass ``lambda e: pm.hook.on_event(event=e)`` to reach the
    plugins); ``clock`` (seconds) and ``new_id`` are injectable for deterministic tests.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        lifecycle: Lifecycle = DEFAULT_LIFECYCLE,
        writeback: WritebackMode = "warn",
        on_event: Callable[[AgentEvent], None] | None = None,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        if writeback not in ("warn", "block"):
            raise LifecycleError(f"writeback must be 'warn' or 'block', got {writeback!r}")
        self.path = str(path)
        self.lifecycle = lifecycle
        self.writeback: WritebackMode = writeback
        self.on_event = on_event
        self._clock = clock
        self._new_id = new_id
        # Makes each compound operation (check, then write) atomic within this process.
        self._lock = threading.RLock()
        # Wakes parents waiting in this process for a notification (others read the table).
        self._notified = threading.Condition(self._lock)
        self._db = Database(self.path, fail=self._fail)
        self._db.connection()  # a file that cannot be opened fails here, naming it
        try:
            self._db.script(_SCHEMA + _pipeline.SCHEMA)
        except sqlite3.Error as exc:
            self._db.close()
            raise self._not_ours(exc) from exc

    # ------------------------------------------------------------------ plumbing

    @property
    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (``":memory:"``: the shared one, used under ``_lock``)."""
        return self._db.connection()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._db.write() as conn:
            yield conn

    def _fail(self, exc: BaseException, doing: Doing) -> BaseException:
        """The store's typed errors for a file it cannot open; the rest passes through."""
        if doing == "folder" or (doing == "open" and not _not_a_database(exc)):
            return LifecycleError(
                f"cannot open the agent store {self.path!r}: {exc}; its directory must exist "
                "(or be creatable) and be readable and writable"
            )
        if doing == "open":
            return self._not_ours(exc)
        return exc

    def _not_ours(self, exc: BaseException) -> LifecycleError:
        return LifecycleError(
            f"cannot open the agent store {self.path!r}: {exc}; is it an agent store made by "
            "stargraph? Pass another path, or move this file away"
        )

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _select(
        self, columns: Sequence[str], rest: str, params: Sequence[Any]
    ) -> list[dict[str, Any]]:
        """The rows of ``SELECT columns rest`` by column name, the JSON-text columns decoded:
        naming the columns once keeps the query and the reading of its rows in step."""
        with self._lock:
            rows = self._conn.execute(f"SELECT {', '.join(columns)} {rest}", params).fetchall()
        return [
            {
                c: orjson.loads(v) if c in _JSON_COLUMNS else v
                for c, v in zip(columns, r, strict=True)
            }
            for r in rows
        ]

    def _audit(
        self,
        conn: sqlite3.Connection,
        agent_id: str,
        action: str,
        detail: Mapping[str, Any],
        *,
        moved: tuple[str | None, str | None] = (None, None),
    ) -> None:
        from_state, to_state = moved
        row = conn.execute("SELECT seq, record FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (0, GENESIS_HASH) if row is None else (row[0], _hash_of(row[1]))
        columns = {
            "agent_id": agent_id,
            "action": action,
            "from_state": from_state,
            "to_state": to_state,
            "at_ms": self._now(),
            "detail": orjson.dumps(dict(detail), option=orjson.OPT_SORT_KEYS).decode(),
        }
        entry = CommitEntry(
            kind="audit",
            lane="agents",
            tool=f"agents.{action}",
            call_id=agent_id,
            args_hash=_columns_hash(columns),
            status=to_state or "",
        )
        _, data = seal(entry, seq=seq + 1, prev_hash=prev)
        conn.execute(
            "INSERT INTO audit_log VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (seq + 1, *(columns[c] for c in _AUDIT_COLUMNS), data),
        )

    def _emit(self, kind: str, agent_id: str, **detail: Any) -> None:
        if self.on_event is not None:
            self.on_event(AgentEvent(kind=kind, agent_id=agent_id, detail=detail))

    def _status(self, conn: sqlite3.Connection, agent_id: str) -> str:
        row = conn.execute("SELECT status FROM agents WHERE id = ?", (agent_id,)).fetchone()
        if row is None:
            raise LifecycleError(f"no agent {agent_id!r} in {self.path}")
        return str(row[0])

    def _move(
        self,
        agent_id: str,
        to: str,
        *,
        error: str | None = None,
        before: Callable[[sqlite3.Connection], None] | None = None,
        **detail: Any,
    ) -> AgentRecord:
        with self._tx() as conn:
            current = self._status(conn, agent_id)
            event = self.lifecycle.event_for(current, to)
            if before is not None:  # writes that belong to this move: same transaction
                before(conn)
            conn.execute(
                "UPDATE agents SET status = ?, error = COALESCE(?, error), updated_ms = ? "
                "WHERE id = ?",
                (to, error, self._now(), agent_id),
            )
            self._audit(conn, agent_id, event, detail, moved=(current, to))
            if to in self.lifecycle.terminal:
                self._release(conn, agent_id)
        return self.get(agent_id)

    def _release(self, conn: sqlite3.Connection, agent_id: str) -> None:
        """An agent ended: its slot goes to the oldest task queued for its type and its
        parent is told, both in the transaction of the move, so neither is lost or doubled
        by a crash."""
        agent_type, pool, task_id = conn.execute(
            "SELECT agent_type, pool, task_id FROM agents WHERE id = ?", (agent_id,)
        ).fetchone()
        parent = _pipeline.parent_of(conn, agent_id)
        if parent is not None:
            _pipeline.notify(conn, parent, agent_id, self._now())
            self._notified.notify_all()
        task = _pipeline.pop(conn, agent_type)
        next_id = None
        if task is not None:
            next_id = self._insert_agent(
                conn, task.profile, task.needs.task_id, task.needs.pool, task.parent
            )
        if parent is not None or next_id is not None:  # else the terminal move says it all
            self._audit(
                conn,
                agent_id,
                "release",
                {"pool": pool, "task_id": task_id, "parent": parent, "next_agent": next_id},
            )

    # ------------------------------------------------------------------ lifecycle

    def allocate(
        self,
        profile: AgentProfile,
        *,
        task_id: str | None = None,
        pool: PoolAssignment | str | None = None,
        parent: str | None = None,
    ) -> AgentRecord:
        """Reserve an agent in the initial state; refused when the type is at its
        ``limits.max_concurrent_tasks`` live agents. ``parent`` names the workflow to notify
        when the agent ends (see :meth:`notifications`)."""
        with self._tx() as conn:
            live = self._live(conn, profile.agent_type)
            if live >= profile.limits.max_concurrent_tasks:
                raise LifecycleError(
                    f"agent type {profile.agent_type!r} already has {live} live agents "
                    f"(limits.max_concurrent_tasks={profile.limits.max_concurrent_tasks}); "
                    "wait for one to terminate, raise the limit, or submit() the task to "
                    "queue it"
                )
            agent_id = self._insert_agent(conn, profile, task_id, pool, parent)
        return self.get(agent_id)

    def _live(self, conn: sqlite3.Connection, agent_type: str) -> int:
        terminal = sorted(self.lifecycle.terminal)
        return int(
            conn.execute(
                "SELECT COUNT(*) FROM agents WHERE agent_type = ? AND status NOT IN "
                f"({','.join('?' * len(terminal))})",
                (agent_type, *terminal),
            ).fetchone()[0]
        )

    def _insert_agent(
        self,
        conn: sqlite3.Connection,
        profile: AgentProfile,
        task_id: str | None,
        pool: PoolAssignment | str | None,
        parent: str | None,
    ) -> str:
        agent_id = self._new_id()
        now = self._now()
        conn.execute(
            "INSERT INTO agents VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)",
            (
                agent_id,
                profile.agent_type,
                None if pool is None else str(pool),
                task_id,
                self.lifecycle.initial,
                profile.model_dump_json(),
                now,
                now,
            ),
        )
        if parent is not None:
            _pipeline.set_parent(conn, agent_id, parent)
        detail = {"task_id": task_id} if parent is None else {"task_id": task_id, "parent": parent}
        self._audit(conn, agent_id, "allocate", detail, moved=(None, self.lifecycle.initial))
        return agent_id

    def submit(
        self, profile: AgentProfile, needs: TaskNeeds, *, parent: str | None = None
    ) -> AgentRecord | QueuedTask:
        """Give ``needs`` an agent of ``profile`` now, or queue it until one ends.

        The profile's ``limits`` size the pool and its queue: while fewer than
        ``max_concurrent_tasks`` agents of the type are live, the task gets a new agent
        (allocated with its ``task_id`` and ``pool``); otherwise it waits in the type's queue
        and gets the slot of the next agent of the type to end. A queue already holding
        ``limits.queue_depth`` tasks refuses it with
        :class:`~stargraph.errors.AgentQueueFullError`, naming the profile and both limits.
        ``parent`` is the workflow notified when the task's agent ends.
        """
        limits = profile.limits
        with self._tx() as conn:
            if self._live(conn, profile.agent_type) < limits.max_concurrent_tasks:
                agent_id = self._insert_agent(conn, profile, needs.task_id, needs.pool, parent)
            else:
                waiting = _pipeline.queue_length(conn, profile.agent_type)
                if waiting >= limits.queue_depth:
                    raise _pipeline.queue_full(profile, waiting)
                return _pipeline.enqueue(conn, profile, needs, parent, self._now())
        return self.get(agent_id)

    def queued(self, agent_type: str | None = None) -> list[QueuedTask]:
        """Tasks waiting for a slot (of one agent type, or all), in the order they will be
        served."""
        with self._lock:
            return _pipeline.queued(self._conn, agent_type)

    def notifications(self, parent: str, *, after: int = 0) -> list[Notification]:
        """What ``parent``'s agents reported when they ended, after ``seq`` ``after``: keep
        the last ``seq`` read and pass it next time to read on (it survives restarts: the
        notifications are rows of the store)."""
        with self._lock:
            return _pipeline.notifications(self._conn, parent, after)

    def wait_notification(
        self, parent: str, *, after: int = 0, timeout: float | None = 60.0, poll: float = 0.5
    ) -> Notification:
        """The first notification for ``parent`` after ``seq`` ``after``, waiting for one
        when there is none yet; a notification stored before the call is returned at once.

        An agent ended through this store object wakes the wait at once; one ended by
        another process is seen within ``poll`` seconds, when the wait reads the table
        again. Raises :class:`~stargraph.errors.WaitTimeoutError` after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._notified:
            while True:
                found = _pipeline.notifications(self._conn, parent, after)
                if found:
                    return found[0]
                left = poll if deadline is None else min(poll, deadline - time.monotonic())
                if left <= 0:
                    raise WaitTimeoutError(
                        f"no agent of parent {parent!r} ended within {timeout}s (after "
                        f"notification {after}); wait again, or check store.agents() for its "
                        "live agents"
                    )
                self._notified.wait(left)

    def pool_members(self, pool: PoolAssignment | str) -> list[str]:
        """The live agents of ``pool``, by id: an agent leaves it when it ends."""
        terminal = sorted(self.lifecycle.terminal)
        with self._lock:
            rows = self._conn.execute(
                "SELECT id FROM agents WHERE pool = ? AND status NOT IN "
                f"({','.join('?' * len(terminal))}) ORDER BY id",
                (str(pool), *terminal),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def transition(self, agent_id: str, to: str, **detail: Any) -> AgentRecord:
        """Move an agent to state ``to``; ``LifecycleError`` when the lifecycle forbids it."""
        return self._move(agent_id, to, **detail)

    def spawn(self, agent_id: str, params: SpawnParams | None = None) -> AgentRecord:
        """PENDING -> INITIALIZING, injecting the spawn parameters.

        ``params`` must name this agent and its pool (the allocated one, if any; otherwise it
        becomes the agent's pool), and its ``skill_refs`` must be skills the profile may run;
        an :class:`~stargraph.errors.AgentConfigError` lists every mismatch and nothing
        moves. The parameters are stored with the agent (``AgentRecord.spawn``) and in the
        audit log; ``initialize`` then loads only ``skill_refs`` and ``terminate`` enforces
        the ``writeback_contract``.
        """
        if params is None:
            return self._move(agent_id, "INITIALIZING")
        record = self.get(agent_id)
        problems = []
        if params.agent_id != agent_id:
            problems.append(
                Problem(
                    "/agent_id",
                    f"the parameters are for agent {params.agent_id!r}, not {agent_id!r}",
                    "spawn each agent with its own parameters",
                )
            )
        if record.pool is not None and record.pool != params.pool_assignment.value:
            problems.append(
                Problem(
                    "/pool_assignment",
                    f"agent {agent_id!r} was allocated to pool {record.pool!r}, the parameters "
                    f"assign {params.pool_assignment.value!r}",
                    "spawn it in the pool it was allocated to",
                )
            )
        lacking = [s for s in params.skill_refs if s not in record.profile.skills]
        if lacking:
            problems.append(
                Problem(
                    "/skill_refs",
                    f"skills {lacking} are not among agent type {record.agent_type!r}'s skills "
                    f"{list(record.profile.skills)}",
                    "refer only to skills the profile may run, or extend the profile",
                )
            )
        if problems:
            raise AgentConfigError(problems, subject=f"spawn parameters of agent {agent_id!r}")
        data = params.model_dump(mode="json")

        def store(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO spawns VALUES (?, ?, ?)",
                (agent_id, params.model_dump_json(), self._now()),
            )
            conn.execute(
                "UPDATE agents SET pool = ? WHERE id = ?",
                (params.pool_assignment.value, agent_id),
            )

        return self._move(agent_id, "INITIALIZING", before=store, params=data)

    def initialize(self, agent_id: str, skills: Sequence[Any] = ()) -> AgentRecord:
        """INITIALIZING -> READY, or -> FAILED naming every tool in the skills'
        ``required_tools`` that the profile's ``permissions.tools`` lacks."""
        record = self.get(agent_id)
        profile = record.profile
        if record.spawn is not None:
            refs = record.spawn.skill_refs
            outside = [str(s.name) for s in skills if str(s.name) not in refs]
            if outside:
                reason = (
                    f"skills {outside} are not in the agent's skill_refs {list(refs)}; an "
                    "agent loads only the skills it was spawned with"
                )
                failed = self._move(agent_id, "FAILED", error=reason, outside_skill_refs=outside)
                self._emit("init_failed", agent_id, outside_skill_refs=outside)
                return failed
        missing: dict[str, list[str]] = {}
        for skill in skills:
            lacking = profile.missing_tools(tuple(getattr(skill, "required_tools", ())))
            if lacking:
                missing[str(skill.name)] = lacking
        if not missing:
            return self._move(agent_id, "READY", skills=[str(s.name) for s in skills])
        names = sorted({t for tools in missing.values() for t in tools})
        reason = (
            f"required tools not in the profile's permissions.tools: {names} (by skill: {missing})"
        )
        record = self._move(agent_id, "FAILED", error=reason, missing_tools=names)
        self._emit("init_failed", agent_id, missing_tools=names)
        return record

    def assign(self, agent_id: str, task_id: str) -> AgentRecord:
        """READY -> BUSY on ``task_id``; the task is recorded in the move's transaction, so a
        refused move leaves the agent's task as it was."""

        def store(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE agents SET task_id = ? WHERE id = ?", (task_id, agent_id))

        return self._move(agent_id, "BUSY", before=store, task_id=task_id)

    def fail(self, agent_id: str, reason: str) -> AgentRecord:
        """Any non-terminal state -> FAILED."""
        return self._move(agent_id, "FAILED", error=reason, reason=reason)

    def terminate(self, agent_id: str) -> AgentRecord:
        """BUSY -> TERMINATED, enforcing the writeback contract (``warn`` or ``block``): the
        agent's ``writeback_contract`` when it was spawned with one, else the default
        (``task_update`` and ``thought_record`` under the store's mode)."""
        contract = self._contract(agent_id)
        missing = self.writeback_missing(agent_id)
        if missing:
            calls = " and ".join(f"{m}(...)" for m in missing)
            message = (
                f"agent {agent_id!r} terminates without its writeback: missing {missing}; "
                f"call {calls} first"
            )
            if (contract.mode or self.writeback) == "block":
                raise LifecycleError(message)
            warnings.warn(message, _writeback.WritebackWarning, stacklevel=2)
            self._emit("writeback_missing", agent_id, missing=missing)
        return self._move(agent_id, "TERMINATED", writeback_missing=missing)

    # ------------------------------------------------------------------ writeback

    def _validated(self, model: type[BaseModel], value: Any, what: str) -> Any:
        if isinstance(value, model):
            return value
        try:
            return model.model_validate(value)
        except (ValidationError, AgentConfigError) as exc:
            error = exc if isinstance(exc, AgentConfigError) else config_error(exc, what)
            fields = [p.pointer.lstrip("/").replace("/", ".") or "(root)" for p in error.problems]
            raise LifecycleError(
                f"{what} does not meet the writeback contract: bad fields {fields} ("
                + "; ".join(p.render() for p in error.problems)
                + ")"
            ) from None

    def task_update(self, agent_id: str, update: TaskUpdate | Mapping[str, Any]) -> TaskUpdate:
        """Record ``task_update{status, progress 0-100, summary}``."""
        item: TaskUpdate = self._validated(TaskUpdate, update, "task_update")
        self._write_back(agent_id, "task_update", "task_updates", item)
        return item

    def thought_record(
        self, agent_id: str, record: ThoughtRecord | Mapping[str, Any]
    ) -> ThoughtRecord:
        """Record ``thought_record{task_id, type="reflection", branch, commit_sha, tests_run,
        blockers}``."""
        item: ThoughtRecord = self._validated(ThoughtRecord, record, "thought_record")
        self._write_back(agent_id, "thought_record", "thought_records", item)
        return item

    def _write_back(self, agent_id: str, action: str, table: str, item: BaseModel) -> None:
        """Store ``item`` as a row of ``table`` (its fields are the columns, beside
        ``agent_id`` and ``at_ms``) for a live agent, audited as ``action``."""
        fields = item.model_dump(mode="json")
        with self._tx() as conn:
            self._status(conn, agent_id)
            row = {
                "agent_id": agent_id,
                **{
                    k: orjson.dumps(v).decode() if k in _JSON_COLUMNS else v
                    for k, v in fields.items()
                },
                "at_ms": self._now(),
            }
            conn.execute(
                f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                tuple(row.values()),
            )
            self._audit(conn, agent_id, action, fields)

    def memory_pack(self, agent_id: str, session_id: str) -> None:
        """The optional ``memory_pack(session_id)``: recorded in the audit log."""
        with self._tx() as conn:
            self._status(conn, agent_id)
            self._audit(conn, agent_id, "memory_pack", {"session_id": session_id})

    def _contract(self, agent_id: str) -> WritebackContract:
        spawn = self.get(agent_id).spawn
        return WritebackContract() if spawn is None else spawn.writeback_contract

    def writeback_missing(self, agent_id: str) -> list[str]:
        """The calls the agent's writeback contract requires that it has not made yet."""
        queries = {
            "task_update": "SELECT 1 FROM task_updates WHERE agent_id = ? LIMIT 1",
            "thought_record": "SELECT 1 FROM thought_records WHERE agent_id = ? LIMIT 1",
            "memory_pack": "SELECT 1 FROM audit_log WHERE agent_id = ? AND action = "
            "'memory_pack' LIMIT 1",
        }
        with self._lock:
            return [
                item
                for item in self._contract(agent_id).required
                if self._conn.execute(queries[item], (agent_id,)).fetchone() is None
            ]

    def orphan_scan(self, *, new_only: bool = False) -> list[str]:
        """Terminated agents without a thought record: each one is warned about
        (:class:`OrphanWarning`), sent as an ``orphan`` event and audited. Nothing is rolled
        back or re-run. ``new_only`` skips agents an earlier scan flagged already (what a
        periodic :class:`~stargraph.agents.OrphanScanner` does, so each is flagged once)."""
        flagged = (
            " AND id NOT IN (SELECT agent_id FROM audit_log WHERE action = 'orphan')"
            if new_only
            else ""
        )
        with self._lock:
            rows = self._conn.execute(
                "SELECT id FROM agents WHERE status = 'TERMINATED' AND id NOT IN "
                f"(SELECT agent_id FROM thought_records){flagged} ORDER BY id"
            ).fetchall()
        orphans = [str(r[0]) for r in rows]
        for agent_id in orphans:
            with self._tx() as conn:
                self._audit(conn, agent_id, "orphan", {"reason": "no thought_record"})
            warnings.warn(
                f"orphaned agent {agent_id!r}: TERMINATED without a thought_record "
                "(no rollback or re-execution is done)",
                _writeback.OrphanWarning,
                stacklevel=2,
            )
            self._emit("orphan", agent_id)
        return orphans

    # ------------------------------------------------------------------ reading

    def get(self, agent_id: str) -> AgentRecord:
        """The agent's row; ``LifecycleError`` if unknown."""
        with self._lock:
            row = self._conn.execute(
                "SELECT id, agent_type, pool, task_id, status, profile, error FROM agents "
                "WHERE id = ?",
                (agent_id,),
            ).fetchone()
            spawn = self._conn.execute(
                "SELECT params FROM spawns WHERE agent_id = ?", (agent_id,)
            ).fetchone()
        if row is None:
            raise LifecycleError(f"no agent {agent_id!r} in {self.path}")
        return AgentRecord(
            id=row[0],
            agent_type=row[1],
            pool=row[2],
            task_id=row[3],
            status=row[4],
            profile=AgentProfile.model_validate_json(row[5]),
            error=row[6],
            spawn=None if spawn is None else SpawnParams.model_validate_json(spawn[0]),
        )

    def active_counts(self) -> dict[str, int]:
        """Live (non-terminal) agents per agent type."""
        terminal = sorted(self.lifecycle.terminal)
        with self._lock:
            rows = self._conn.execute(
                "SELECT agent_type, COUNT(*) FROM agents WHERE status NOT IN "
                f"({','.join('?' * len(terminal))}) GROUP BY agent_type",
                terminal,
            ).fetchall()
        return {str(t): int(n) for t, n in rows}

    def dispatch(
        self,
        profiles: Sequence[AgentProfile],
        tasks: Sequence[TaskNeeds],
        *,
        strategy: PoolStrategy | str | Strategy = PoolStrategy.CAPACITY_AWARE,
    ) -> list[tuple[TaskNeeds, AgentRecord | None]]:
        """Allocate an agent for each task of a queue under a pool strategy.

        The strategy sees this store's live agents per type and, for ``ROUND_ROBIN``, the
        type allocated last (so the rotation carries on across calls). Tasks come back in the
        order they were served, each with its new agent (allocated with the task's
        ``task_id`` and ``pool``) or ``None`` when no profile could take it.
        """
        with self._lock:
            row = self._conn.execute(
                "SELECT agent_type FROM agents ORDER BY rowid DESC LIMIT 1"
            ).fetchone()
            placed = plan(
                profiles,
                tasks,
                self.active_counts(),
                strategy=strategy,
                last=None if row is None else str(row[0]),
            )
            return [
                (
                    a.task,
                    None
                    if a.profile is None
                    else self.allocate(a.profile, task_id=a.task.task_id, pool=a.task.pool),
                )
                for a in placed
            ]

    def agents(self, status: str | None = None) -> list[AgentRecord]:
        """Every agent (optionally only those in ``status``), by id."""
        with self._lock:
            ids = [
                r[0]
                for r in self._conn.execute(
                    "SELECT id FROM agents WHERE ? IS NULL OR status = ? ORDER BY id",
                    (status, status),
                )
            ]
        return [self.get(i) for i in ids]

    def audit(self, agent_id: str | None = None) -> list[AuditRow]:
        """The audit log in ``seq`` order (optionally one agent's rows)."""
        rows = self._select(
            _AUDIT_ROW_COLUMNS,
            "FROM audit_log WHERE ? IS NULL OR agent_id = ? ORDER BY seq",
            (agent_id, agent_id),
        )
        return [AuditRow(**row) for row in rows]

    def thought_records(self, agent_id: str) -> list[ThoughtRecord]:
        """The agent's thought records, oldest first."""
        rows = self._select(
            _THOUGHT_COLUMNS, "FROM thought_records WHERE agent_id = ? ORDER BY id", (agent_id,)
        )
        return [ThoughtRecord(**row) for row in rows]

    def verify_chain(self) -> int | None:
        """The first broken ``seq`` of ``audit_log`` (a record that does not chain, or a row
        whose columns no longer hash to its record), or ``None`` when intact."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, agent_id, action, from_state, to_state, at_ms, detail, record "
                "FROM audit_log ORDER BY seq"
            ).fetchall()
        broken = verify_rows((r[0], bytes(r[7])) for r in rows)
        for r in rows:
            if broken is not None and r[0] >= broken:
                break
            columns = dict(zip(_AUDIT_COLUMNS, r[1:7], strict=True))
            record = orjson.loads(r[7])
            if (
                record.get("args_hash") != _columns_hash(columns)
                or record.get("call_id") != columns["agent_id"]
            ):
                return int(r[0])
        return broken

    def close(self) -> None:
        """Close the connections."""
        with self._lock:
            self._db.close()


def _not_a_database(exc: BaseException) -> bool:
    """A file SQLite opened but cannot read (not a database, or damaged), as opposed to a
    path it cannot open at all (``OperationalError``)."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError)


def _columns_hash(columns: Mapping[str, Any]) -> str:
    return sha256_hex(canonical_json(dict(columns)))


def _hash_of(data: bytes) -> str:
    try:
        value = orjson.loads(data)["hash"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        value = None
    # Chaining after a corrupt head would bless the damage; a marker keeps it visible.
    return value if isinstance(value, str) else "corrupt:" + sha256_hex(bytes(data))
