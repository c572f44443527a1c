"""The session state machine: the top of the stack Session -> Lane -> Skill -> LLM step.

A :class:`Session` owns a :class:`~stargraph.skills.machine.MachineRuntime` (the lanes and
the skill machines that run on them) and keeps the session's own lifecycle in a
:class:`SessionStore`, a SQLite file, so that another process can tell a live session from a
dead one and bring the dead one back:

    NEW --start--> RUNNING --stop--> STOPPED
                    |   ^
              crash |   | recover
                    v   |
                   CRASHED --stop--> STOPPED

While ``RUNNING`` the session's owner calls :meth:`Session.heartbeat` now and then. A session
whose last heartbeat is older than ``stale_after`` seconds is presumed dead
(:meth:`SessionStore.stale` lists them); :meth:`Session.recover` marks it ``CRASHED``, then
``recover``s it: each lane's last unfinished skill run resumes from its last committed
checkpoint (completed steps, their model and tool calls, are not made again), and a run the
crash cut off before its first checkpoint starts again from its recorded input.

The machine is data (:data:`SESSION_MACHINE`), checked by the one state-machine validator
like every lane and skill machine.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson
from pydantic import ConfigDict, JsonValue

from stargraph._lifecycle import Closing
from stargraph._sqlite import Database, Doing
from stargraph._typed import TypedModel
from stargraph.errors import RunNotFoundError, SessionError, SkillValidationError, UsageError
from stargraph.skills.machine._lanes import machine_shape
from stargraph.skills.machine._runtime import MachineRuntime, SkillRun
from stargraph.skills.machine._spec import SkillSpec
from stargraph.skills.machine._validate import validate_machine

__all__ = [
    "RESUMABLE",
    "SESSION_MACHINE",
    "Session",
    "SessionEvent",
    "SessionRecord",
    "SessionStore",
]

SESSION_MACHINE: Final[Mapping[str, Any]] = {
    "name": "session",
    "initial_state": "NEW",
    "states": {
        "NEW": {"transitions": [{"on": "start", "to": "RUNNING"}]},
        "RUNNING": {
            "transitions": [
                {"on": "heartbeat", "to": "RUNNING"},
                {"on": "crash", "to": "CRASHED"},
                {"on": "stop", "to": "STOPPED"},
            ]
        },
        "CRASHED": {
            "transitions": [
                {"on": "recover", "to": "RUNNING"},
                {"on": "stop", "to": "STOPPED"},
            ]
        },
        "STOPPED": {"terminal": True},
    },
}
"""The session lifecycle as data: start, heartbeat, stop, crash and recover."""

_SHAPE: Final = machine_shape(SESSION_MACHINE, where="session machine#")
if _problems := validate_machine(_SHAPE):  # pragma: no cover - the data above is fixed
    raise SkillValidationError(_problems, subject="session machine")
_MOVES: Final = {state: dict(shape.transitions) for state, shape in _SHAPE.states.items()}

RESUMABLE: Final = frozenset({"running", "orphaned", "failed"})
"""Run statuses recovery resumes: cut off by the crash. ``done`` runs are over,
``interrupted`` ones wait for an answer and ``cancelled`` ones were stopped on purpose."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, state TEXT NOT NULL, started_ms INTEGER NOT NULL,
    heartbeat_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS session_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL, event TEXT NOT NULL,
    from_state TEXT NOT NULL, to_state TEXT NOT NULL, at_ms INTEGER NOT NULL,
    detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS session_runs (
    run_id TEXT PRIMARY KEY, session TEXT NOT NULL, lane TEXT NOT NULL, skill TEXT NOT NULL,
    input TEXT NOT NULL, memory TEXT NOT NULL, at_ms INTEGER NOT NULL);
"""


class SessionRecord(TypedModel):
    """A session as the store holds it."""

    typed_error = SessionError

    model_config = ConfigDict(frozen=True)

    id: str
    """The session id (the runtime's ``session``)."""
    state: str
    """``NEW``, ``RUNNING``, ``CRASHED`` or ``STOPPED``."""
    started_ms: int
    """When it was first started, ms since the epoch (the store's clock)."""
    heartbeat_ms: int
    """Its last heartbeat (or start, or recovery)."""


class SessionEvent(TypedModel):
    """One move of a session's machine (heartbeats are not recorded: they only move
    ``heartbeat_ms``)."""

    typed_error = SessionError

    model_config = ConfigDict(frozen=True)

    seq: int
    """Order in the store."""
    event: str
    """``start``, ``crash``, ``recover`` or ``stop``."""
    from_state: str
    """State before."""
    to_state: str
    """State after."""
    at_ms: int
    """When."""
    detail: dict[str, JsonValue]
    """Specifics: the runs a recovery resumed, how stale a crashed session was."""


class SessionStore(Closing):
    """Sessions, their moves and the skill runs they started, in one SQLite file.

    ``clock`` (seconds since the epoch) is injectable, so staleness is testable without
    waiting.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = str(path)
        self._clock = clock
        self._db = Database(self.path, fail=self._fail)
        self._db.script(_SCHEMA)

    def _fail(self, exc: BaseException, doing: Doing) -> BaseException:
        if doing in ("folder", "open"):
            return SessionError(
                f"cannot open the session store {self.path!r}: {exc}; pass a path in a "
                "writable directory to a SQLite file made by SessionStore (or a new one)"
            )
        return exc

    def now_ms(self) -> int:
        """The store's clock, in ms."""
        return int(self._clock() * 1000)

    def _row(self, conn: sqlite3.Connection, session: str) -> tuple[str, int, int] | None:
        row = conn.execute(
            "SELECT state, started_ms, heartbeat_ms FROM sessions WHERE id = ?", (session,)
        ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]), int(row[2]))

    def get(self, session: str) -> SessionRecord:
        """The session ``session``; :class:`~stargraph.errors.SessionError` if unknown."""
        with self._db.read() as conn:
            row = self._row(conn, session)
        if row is None:
            raise SessionError(f"no session {session!r} in {self.path}; start() it first")
        return SessionRecord(id=session, state=row[0], started_ms=row[1], heartbeat_ms=row[2])

    def state(self, session: str) -> str:
        """The session's state; ``NEW`` for a session never started."""
        with self._db.read() as conn:
            row = self._row(conn, session)
        return "NEW" if row is None else row[0]

    def fire(self, session: str, event: str, **detail: JsonValue) -> SessionRecord:
        """Move ``session`` on ``event`` (and refresh its heartbeat);
        :class:`~stargraph.errors.SessionError` when its state has no such move."""
        now = self.now_ms()
        with self._db.write() as conn:
            row = self._row(conn, session)
            current = "NEW" if row is None else row[0]
            target = _MOVES[current].get(event)
            if target is None:
                raise SessionError(
                    f"session {session!r} is {current}: it has no {event!r} move there "
                    f"(allowed: {sorted(_MOVES[current])})"
                )
            if row is None:
                conn.execute(
                    "INSERT INTO sessions VALUES (?, ?, ?, ?, ?)",
                    (session, target, now, now, now),
                )
            else:
                conn.execute(
                    "UPDATE sessions SET state = ?, heartbeat_ms = ?, updated_ms = ? WHERE id = ?",
                    (target, now, now, session),
                )
            if event != "heartbeat":
                conn.execute(
                    "INSERT INTO session_events (session, event, from_state, to_state, at_ms, "
                    "detail) VALUES (?, ?, ?, ?, ?, ?)",
                    (session, event, current, target, now, _dumps(detail)),
                )
        return self.get(session)

    def stale(self, after: float) -> list[SessionRecord]:
        """``RUNNING`` sessions whose last heartbeat is more than ``after`` seconds old: the
        ones to :meth:`Session.recover`."""
        cutoff = self.now_ms() - int(after * 1000)
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT id, state, started_ms, heartbeat_ms FROM sessions "
                "WHERE state = 'RUNNING' AND heartbeat_ms < ? ORDER BY id",
                (cutoff,),
            ).fetchall()
        return [
            SessionRecord(id=r[0], state=r[1], started_ms=r[2], heartbeat_ms=r[3]) for r in rows
        ]

    def events(self, session: str) -> list[SessionEvent]:
        """The session's moves, oldest first."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT seq, event, from_state, to_state, at_ms, detail FROM session_events "
                "WHERE session = ? ORDER BY seq",
                (session,),
            ).fetchall()
        return [
            SessionEvent(
                seq=r[0],
                event=r[1],
                from_state=r[2],
                to_state=r[3],
                at_ms=r[4],
                detail=orjson.loads(r[5]),
            )
            for r in rows
        ]

    def add_run(
        self,
        session: str,
        lane: str,
        skill: str,
        input: Mapping[str, Any],
        memory: str,
    ) -> str:
        """Record a skill run the session starts; returns its run id, unique in the store
        across restarts (``<session>/<lane>/<n>``)."""
        with self._db.write() as conn:
            count = conn.execute(
                "SELECT COUNT(*) FROM session_runs WHERE session = ?", (session,)
            ).fetchone()[0]
            run_id = f"{session}/{lane}/{int(count) + 1}"
            conn.execute(
                "INSERT INTO session_runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, session, lane, skill, _dumps(dict(input)), memory, self.now_ms()),
            )
        return run_id

    def runs(self, session: str) -> list[dict[str, Any]]:
        """The skill runs the session started, oldest first: ``{run_id, lane, skill, input,
        memory}``."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT run_id, lane, skill, input, memory FROM session_runs "
                "WHERE session = ? ORDER BY rowid",
                (session,),
            ).fetchall()
        return [
            {"run_id": r[0], "lane": r[1], "skill": r[2], "input": orjson.loads(r[3]),
             "memory": r[4]}
            for r in rows
        ]  # fmt: skip

    def close(self) -> None:
        """Close the connections."""
        self._db.close()


class Session:
    """A session over a :class:`MachineRuntime`, its lifecycle kept in a
    :class:`SessionStore`; the session id is the runtime's ``session``.

    Skills run through :meth:`run` are recorded, so a recovery knows what to resume; the
    runtime needs a checkpoint ``store`` for a run to resume from its checkpoints.
    """

    def __init__(self, runtime: MachineRuntime, store: SessionStore) -> None:
        self.runtime = runtime
        self.store = store
        self.id = runtime.session

    def _spec(self, name: str) -> SkillSpec:
        spec = self.runtime.skills.get(name)
        if spec is None:
            raise SessionError(
                f"session {self.id!r} has no skill {name!r} in its runtime (it has "
                f"{sorted(self.runtime.skills)}); build the MachineRuntime with the skills the "
                "session runs"
            )
        return spec

    @property
    def state(self) -> str:
        """The session's state in the store."""
        return self.store.state(self.id)

    def start(self) -> SessionRecord:
        """``NEW -> RUNNING``."""
        return self.store.fire(self.id, "start")

    def heartbeat(self) -> SessionRecord:
        """Say the session is alive (``RUNNING`` only)."""
        return self.store.fire(self.id, "heartbeat")

    def run(
        self,
        skill: str | SkillSpec,
        input: Mapping[str, Any] | None = None,
        *,
        lane: str = "core",
        memory: str = "",
    ) -> SkillRun:
        """Start ``skill`` on ``lane`` (see :meth:`MachineRuntime.start`), recorded with the
        session so that a recovery resumes it; the session must be ``RUNNING``."""
        if self.state != "RUNNING":
            raise SessionError(
                f"session {self.id!r} is {self.state}, not RUNNING: start() it (or recover() "
                "it) before running skills"
            )
        spec = self._spec(skill) if isinstance(skill, str) else skill
        values = dict(input or {})
        run_id = self.store.add_run(self.id, lane, spec.name, values, memory)
        return self.runtime.start(spec, values, lane=lane, memory=memory, run_id=run_id)

    def stop(self, *, timeout: float | None = 60.0) -> SessionRecord:
        """Wait for the skills running on its lanes, then ``-> STOPPED``."""
        for lane in sorted({r["lane"] for r in self.store.runs(self.id)}):
            active = self.runtime.active(lane)
            if active is not None:
                active.result(timeout)
        return self.store.fire(self.id, "stop")

    def recover(self, *, stale_after: float) -> list[SkillRun]:
        """Bring the session back if it crashed: a ``RUNNING`` session whose heartbeat is
        older than ``stale_after`` seconds is marked ``CRASHED`` first; a ``CRASHED`` one is
        recovered (``-> RUNNING``) and each lane's last unfinished skill run resumes from
        its last checkpoint, in the background. Returns the resumed runs; a live session
        (fresh heartbeat) or a stopped one is left alone and returns ``[]``."""
        record = self.store.get(self.id)
        if record.state == "RUNNING":
            age = self.store.now_ms() - record.heartbeat_ms
            if age <= stale_after * 1000:
                return []
            self.store.fire(self.id, "crash", heartbeat_age_ms=age)
        elif record.state != "CRASHED":
            return []
        checkpoints = self.runtime.store
        if checkpoints is None:
            raise UsageError(
                f"cannot recover session {self.id!r}: its MachineRuntime has no checkpoint "
                "store to resume its runs from; pass store=... to the runtime"
            )
        last: dict[str, dict[str, Any]] = {}
        for run in self.store.runs(self.id):
            last[run["lane"]] = run  # one active skill per lane: only the last can be open
        plans: list[tuple[dict[str, Any], bool]] = []
        for lane in sorted(last):
            run = last[lane]
            try:
                status = checkpoints.get_run(run["run_id"]).status
            except RunNotFoundError:
                plans.append((run, False))  # cut off before its first checkpoint
                continue
            if status in RESUMABLE:
                plans.append((run, True))
        self.store.fire(
            self.id,
            "recover",
            resumed=[r["run_id"] for r, stored in plans if stored],
            restarted=[r["run_id"] for r, stored in plans if not stored],
        )
        out = []
        for run, stored in plans:
            spec = self._spec(run["skill"])
            if stored:
                out.append(self.runtime.resume(spec, run["run_id"], lane=run["lane"]))
            else:
                out.append(
                    self.runtime.start(
                        spec,
                        run["input"],
                        lane=run["lane"],
                        memory=run["memory"],
                        run_id=run["run_id"],
                    )
                )
        return out


def _dumps(value: Mapping[str, Any]) -> str:
    return orjson.dumps(dict(value), option=orjson.OPT_SORT_KEYS).decode()
