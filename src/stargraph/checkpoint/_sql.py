"""What the SQL stores (``SqliteStore``, ``PostgresStore``) share: the runs row's columns and
their mapping to a :class:`RunRecord`, what a new run is checked and encoded as, the fences'
error messages, the lease takeover rule, the queries that read runs, steps, pending writes and
the journal, and the whole-run write (:class:`SqlStore`, their base class).

Each store keeps only what differs: its placeholders (``?`` or ``%s``), how it stores text
(SQLite ``TEXT``, PostgreSQL ``bytea``) and times, its connections and transactions, and the
statements whose form differs (the fenced commit, the inserts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple, cast

import pydantic_core

from stargraph._lifecycle import Closing
from stargraph._typed import validate_raw
from stargraph.checkpoint._codec import decode, encode, encode_extra, why
from stargraph.checkpoint._lease import (
    busy_error,
    effective_status,
    is_orphaned,
    lease_lost,
    owner_from,
)
from stargraph.checkpoint._protocol import StoreFeature
from stargraph.checkpoint._records import (
    ENDED_STATUSES,
    JournalEntry,
    PendingWrite,
    RunOwner,
    RunRecord,
    RunStatus,
    StepRecord,
    check_status,
    check_thread,
    clip_error,
    iso_now,
    missing,
    resolve_facts,
)
from stargraph.errors import CheckpointError, CorruptCheckpointError, RunNotFoundError

if TYPE_CHECKING:
    from stargraph.checkpoint._protocol import CheckpointStore

__all__ = [
    "RELEASE",
    "RUN_COLUMNS",
    "Commit",
    "SqlStore",
    "decode_run",
    "list_runs_sql",
    "list_threads_sql",
    "may_acquire",
    "write_whole_run",
]

RUN_COLUMNS: Final = (
    "run_id, graph_name, graph_hash, code_hash, status, last_step, parent_run_id, "
    "parent_step, created_at, updated_at, extra, lease_token, lease_owner, lease_expires, "
    "thread_id, turn"
)
"""The runs row as both stores read it; :func:`decode_run` takes the columns in this order."""

_RUN_FIELDS: Final = (
    "run_id",
    "graph_name",
    "graph_hash",
    "code_hash",
    "status",
    "last_step",
    "parent_run_id",
    "parent_step",
    "created_at",
    "updated_at",
)
# Columns holding caller-given text (PostgreSQL stores it as bytea: see its module).
_TEXT_FIELDS: Final = frozenset(
    {"run_id", "graph_name", "graph_hash", "code_hash", "parent_run_id", "created_at"}
)
_EXTRA_FIELDS: Final = ("error", "stopped_by", "stop_reason", "interrupt")

RELEASE: Final = ", lease_token = NULL, lease_owner = NULL, lease_expires = NULL"
"""What a ``SET`` adds to give up the run's lease."""

_NEWEST: Final = "ORDER BY created_at DESC, run_id DESC"
_MAX_STEP: Final = 2**63 - 1


def _same(value: Any) -> Any:
    return value


class Commit(NamedTuple):
    """What a fenced step commit writes besides the step number (see ``commit_step``)."""

    status: RunStatus
    extra: bytes | None
    owner: str | None
    snapshot: bool
    payload: bytes


def decode_run(
    row: Sequence[Any],
    *,
    lease: Callable[[Any, Any], tuple[str, bool]],
    damaged: str,
    text: Callable[[Any], Any] = _same,
    blob: Callable[[Any], bytes] = bytes,
) -> RunRecord:
    """The record of a runs row read as :data:`RUN_COLUMNS` plus anything after them.

    ``lease(lease_expires, row)`` gives the expiry as ISO text and whether it lapsed (each
    store keeps its own clock); ``text`` and ``blob`` turn the stored text and blobs back
    into ``str`` and ``bytes``. A row that does not decode raises ``CorruptCheckpointError``
    saying that ``damaged`` ("the checkpoint file is damaged").
    """
    run_id: object = row[0]
    step = row[5] if isinstance(row[5], int) else None
    try:
        run_id = text(row[0])
        data: dict[str, Any] = dict(zip(_RUN_FIELDS, row, strict=False))
        if text is not _same:
            for name in _TEXT_FIELDS:
                data[name] = text(data[name])
        if row[10] is not None:
            extra = pydantic_core.from_json(blob(row[10]))
            if not isinstance(extra, dict) or not set(extra) <= set(_EXTRA_FIELDS):
                raise TypeError(
                    "the extra column is not an object of error/stopped_by/stop_reason/interrupt"
                )
            data.update(extra)
        expired = False
        if row[12] is not None:
            data["owner"] = owner_from(str(row[11]), blob(row[12]))
            data["lease_expires"], expired = lease(row[13], row)
        if row[14] is not None:
            data["thread_id"], data["turn"] = text(row[14]), row[15]
        record = validate_raw(RunRecord, data)
    except (ValueError, TypeError, AttributeError) as exc:  # ValidationError, Unicode ...
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step}: the runs row cannot be decoded ({why(exc)}); {damaged}",
            run_id=str(run_id),
            step=step,
        ) from exc
    status = effective_status(record.status, record.owner, expired=expired)
    return record if status == record.status else record.model_copy(update={"status": status})


def may_acquire(before: RunRecord, owner: RunOwner, *, replace: str | None, expired: bool) -> None:
    """Refuse ``owner`` the run while another live owner holds its lease (``replace``: a
    token ``owner`` takes over knowingly)."""
    held = before.owner
    if (
        held is not None
        and held.token not in (replace, owner.token)
        and before.status != "orphaned"
        and not is_orphaned(held, expired=expired)
    ):
        raise busy_error(before.run_id, held, before.lease_expires)


def list_runs_sql(
    select: str, status: RunStatus | None, limit: int, *, mark: str
) -> tuple[str, tuple[object, ...], bool]:
    """The query listing runs newest first (``select`` is ``SELECT ... FROM runs``), its
    parameters, and whether the caller must still keep only ``status`` and cut at ``limit``:
    orphaned runs are stored as running and told apart only once decoded."""
    if status is None:
        return f"{select} {_NEWEST} LIMIT {mark}", (limit,), False
    if status in ("running", "orphaned"):
        return f"{select} WHERE status = 'running' {_NEWEST}", (), True
    return f"{select} WHERE status = {mark} {_NEWEST} LIMIT {mark}", (status, limit), False


def list_threads_sql(select: str, runs: str, *, mark: str) -> str:
    """The query for the latest turn of each thread, newest first (``select`` reads ``runs``
    as ``r``); its one parameter is the limit."""
    return (
        f"{select} AS r WHERE thread_id IS NOT NULL AND turn = "
        f"(SELECT MAX(turn) FROM {runs} WHERE thread_id = r.thread_id) {_NEWEST} LIMIT {mark}"
    )


def write_whole_run(
    store: CheckpointStore,
    run: RunRecord,
    steps: Sequence[StepRecord],
    *,
    pending: Sequence[PendingWrite],
    journal: Sequence[JournalEntry],
    graph: tuple[str, bytes] | None,
) -> None:
    """Write a whole run through ``store``'s own methods, each row exactly as they write it;
    the caller runs this inside one transaction (``write_run``)."""
    rid = run.run_id
    if not steps:
        raise CheckpointError(f"run {rid!r}: write_run needs at least step 0", run_id=rid)
    start = run.model_copy(
        update={
            "status": "running",
            "last_step": steps[0].step,
            "error": None,
            "stopped_by": None,
            "stop_reason": None,
            "interrupt": None,
            "owner": None,
            "lease_expires": None,
        }
    )
    if graph is not None:
        store.put_graph(*graph)
    store.create_run(start, steps[0])
    for step in steps[1:]:
        store.commit_step(rid, step)
    for write in pending:
        store.put_pending(rid, write)
    for entry in journal:
        store.append_journal(rid, entry)
    store.set_status(
        rid,
        run.status,
        error=run.error,
        stopped_by=run.stopped_by,
        stop_reason=run.stop_reason,
        interrupt=run.interrupt,
    )


class SqlStore(Closing):
    """The base of the SQL ``CheckpointStore`` implementations: the public methods whose
    logic is the same in every SQL database, written once over a few hooks each store
    implements (its placeholder, table names, key encoding, queries and transactions)."""

    features: ClassVar[frozenset[StoreFeature]] = frozenset(
        {"releases_on_final_commit", "refer_to_facts", "write_run", "node_cache"}
    )
    """A run's last step and its status change are one transaction; rule facts are written
    only when they changed (an agent's think and act rows are then a few hundred bytes
    shorter); an ``exit``-mode run is written in one transaction (``write_run``); cached
    nodes keep their entries in a table of the database (``node_cache``), which every
    process and store object on it shares."""

    _mark: str
    """The parameter placeholder: ``?`` (SQLite) or ``%s`` (PostgreSQL)."""
    _select_runs: str
    """``SELECT <RUN_COLUMNS ...> FROM <runs table>``: what :meth:`_decode_run` decodes."""
    _runs_at: str
    """Where the store keeps its runs, as its errors name it (a file, a schema)."""

    # ----------------------------------------------------------------- hooks

    @cached_property
    def _statements(self) -> dict[str, str]:
        return {}

    def _sql(self, template: str) -> str:
        """``template`` in this store's SQL, formatted once: ``{m}`` is the placeholder,
        ``{runs}``, ``{steps}``, ``{pending}``, ``{journal}`` the tables, ``{select}``
        :attr:`_select_runs`."""
        sql = self._statements.get(template)
        if sql is None:
            sql = self._statements[template] = template.format(
                m=self._mark,
                select=self._select_runs,
                **{t: self._table(t) for t in ("runs", "steps", "pending", "journal")},
            )
        return sql

    def _table(self, name: str) -> str:
        """The table ``name`` as the store's SQL names it (a schema may qualify it)."""
        return name

    def _key(self, text: str) -> object:
        """A run id (or thread id) as the store binds it."""
        return text

    def _query(self, sql: str, params: Sequence[object]) -> list[Any]:
        """Every row of one read."""
        raise NotImplementedError

    def _decode_run(self, row: Sequence[Any]) -> RunRecord:
        raise NotImplementedError

    def _missing(self, run_id: str) -> RunNotFoundError:
        return missing(run_id, self._runs_at)

    def _fence_error(
        self, conn: Any, run_id: str, owner: str | None, step: int | None
    ) -> CheckpointError:
        """Why a compare-and-set on ``(last_step, lease_token)`` matched no row, read on the
        write's connection ``conn`` (step ``None``: a status change, not a step commit)."""
        row = conn.execute(
            self._sql("SELECT last_step, lease_token, lease_owner FROM {runs} WHERE run_id = {m}"),
            (self._key(run_id),),
        ).fetchone()
        if row is None:
            return self._missing(run_id)
        if step is not None and row[0] != step - 1:
            return CheckpointError(
                f"run {run_id!r}: step {step} cannot follow committed step {row[0]}; "
                "another writer owns this run, or history was forked",
                run_id=run_id,
                step=step,
            )
        holder = None if row[2] is None else owner_from(str(row[1]), bytes(row[2]))
        return lease_lost(run_id, owner, holder)

    def _text(self, value: str | None, run_id: str) -> object:
        """Other caller-given text of run ``run_id`` as the store binds it."""
        return value

    _token_is: str
    """SQL comparing ``lease_token`` with a parameter that may be NULL."""

    def _lease_until(self, lease_s: float) -> tuple[str, object]:
        """The SQL and the parameter for a lease that lasts ``lease_s`` from now."""
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[Any]:
        """A connection whose statements commit when the block ends (inside :meth:`write_run`
        on the same thread, they join its transaction)."""
        raise NotImplementedError

    def _notify(self, conn: Any, run_id: str) -> None:
        """Tell listeners that ``run_id`` changed, on the write's connection ``conn`` right
        after it committed (nothing by default: :func:`watch_runs` polls other stores)."""

    def _change(self, sql: str, params: Sequence[object]) -> int:
        """One write statement in its own transaction; the number of rows it changed."""
        with self._write() as conn:
            return int(conn.execute(sql, params).rowcount)

    def _fenced(self, sql: str, params: Sequence[object], run_id: str, owner: str | None) -> None:
        """One compare-and-set on the run's lease; when it matched no row, raise why (read
        in the same transaction)."""
        with self._write() as conn:
            if conn.execute(sql, params).rowcount != 1:
                raise self._fence_error(conn, run_id, owner, None)
            self._notify(conn, run_id)  # a status change (interrupt, fail, finish)

    def _advance(self, run_id: str, number: int, commit: Commit) -> None:
        """The fenced commit of step ``number`` (see :meth:`commit_step`)."""
        raise NotImplementedError

    def _batch(self) -> AbstractContextManager[object]:
        """One transaction that the store's own methods join, on this thread."""
        raise NotImplementedError

    # ----------------------------------------------------------------- writes

    def _new_run(self, run: RunRecord, first: StepRecord) -> tuple[bytes, bytes | None, str]:
        """What ``create_run`` checks and encodes before its insert, in every dialect: the
        step-0 payload, the status fields' column and the creation time."""
        rid = run.run_id
        check_status(rid, run.status)
        check_thread(run)
        payload = encode(first, run_id=rid, step=first.step, pack=True)
        extra = encode_extra(
            clip_error(run.error),
            run.stopped_by,
            run.interrupt,
            run_id=rid,
            stop_reason=run.stop_reason,
        )
        return payload, extra, iso_now()

    def commit_step(
        self,
        run_id: str,
        step: StepRecord,
        *,
        status: RunStatus = "running",
        error: str | None = None,
        stopped_by: str | None = None,
        interrupt: object = None,
        owner: str | None = None,
        stop_reason: str | None = None,
    ) -> None:
        """In one transaction: append ``step`` (must be ``last_step + 1``), set the run's
        ``last_step``/status fields, and drop the pending writes and journal of that step.
        Fenced on ``owner`` (the lease token). The lease is kept, but status ``done`` or
        ``halted`` (the run's last step) releases it, as :meth:`set_status` does."""
        check_status(run_id, status)
        number = step.step
        payload = encode(step, run_id=run_id, step=number, pack=True)
        # The common commit sets none of the status fields: no column to build.
        extra = (
            None
            if error is None and stopped_by is None and interrupt is None and stop_reason is None
            else encode_extra(
                clip_error(error), stopped_by, interrupt, run_id=run_id, stop_reason=stop_reason
            )
        )
        commit = Commit(status, extra, owner, step.snapshot is not None, payload)
        if status not in ENDED_STATUSES:
            self._advance(run_id, number, commit)
            return
        self._advance_last(run_id, number, commit)
        self._released(run_id, status)

    def _advance_last(self, run_id: str, number: int, commit: Commit) -> None:
        """:meth:`_advance` of the run's last step (status ``done`` or ``halted``), which
        also releases the lease, in one transaction (a dialect may do both in one
        statement)."""
        with self._batch():
            # The store's methods join this transaction.
            self._advance(run_id, number, commit)
            if commit.owner is not None:
                self.release(run_id, commit.owner)

    def set_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        error: str | None = None,
        stopped_by: str | None = None,
        interrupt: object = None,
        owner: str | None = None,
        stop_reason: str | None = None,
    ) -> None:
        """Change a run's status without committing a step (interrupt, fail, finish). Fenced
        on ``owner``; any status but ``running`` also releases the lease."""
        check_status(run_id, status)
        extra = encode_extra(
            clip_error(error), stopped_by, interrupt, run_id=run_id, stop_reason=stop_reason
        )
        release = "" if status == "running" else RELEASE
        self._fenced(
            self._sql(
                "UPDATE {runs} SET status = {m}, extra = {m}, updated_at = {m}"
                f"{release} WHERE run_id = {{m}} AND {self._token_is}"
            ),
            (status, extra, iso_now(), self._key(run_id), owner),
            run_id,
            owner,
        )
        if release:
            self._released(run_id, status)

    def _released(self, run_id: str, status: RunStatus) -> None:
        """Called after ``run_id``'s lease was given up by a change to ``status``: whoever
        resumes the run acquires it first, so a dialect forgets what it assumed about the
        run's rows (and, when it is done, drops what only a resume would read)."""

    def heartbeat(self, run_id: str, owner: RunOwner) -> bool:
        """Renew ``owner``'s lease; ``False`` if it is not the run's lease any more."""
        until, param = self._lease_until(owner.lease_s)
        changed = self._change(
            self._sql(
                f"UPDATE {{runs}} SET lease_expires = {until} "
                "WHERE run_id = {m} AND lease_token = {m}"
            ),
            (param, self._key(run_id), owner.token),
        )
        return changed == 1

    def release(self, run_id: str, token: str) -> None:
        """Give up the lease ``token`` without changing the status."""
        self._change(
            self._sql(
                f"UPDATE {{runs}} SET {RELEASE[2:]} WHERE run_id = {{m}} AND lease_token = {{m}}"
            ),
            (self._key(run_id), token),
        )

    def set_graph(self, run_id: str, *, graph_hash: str, code_hash: str) -> None:
        """Record that the run continues under another graph (after an explicit migration)."""
        changed = self._change(
            self._sql(
                "UPDATE {runs} SET graph_hash = {m}, code_hash = {m}, updated_at = {m} "
                "WHERE run_id = {m}"
            ),
            (
                self._text(graph_hash, run_id),
                self._text(code_hash, run_id),
                iso_now(),
                self._key(run_id),
            ),
        )
        if changed != 1:
            raise self._missing(run_id)

    def write_run(
        self,
        run: RunRecord,
        steps: Sequence[StepRecord],
        *,
        pending: Sequence[PendingWrite] = (),
        journal: Sequence[JournalEntry] = (),
        graph: tuple[str, bytes] | None = None,
    ) -> None:
        """Insert a whole run - its record as it ended, every step from 0, the pending writes
        and journal of its unfinished step, and ``graph`` (its hash and IR, as ``put_graph``
        keeps them) - in one transaction, without a lease: what a run kept in memory
        (``durability="exit"``) writes when it stops. Raises like ``create_run`` if the run
        id exists; nothing is written then."""
        with self._batch():
            # The store's methods join this transaction: one commit, every row written
            # exactly as those methods write it.
            store = cast("CheckpointStore", self)  # the subclasses implement it all
            write_whole_run(store, run, steps, pending=pending, journal=journal, graph=graph)

    # ----------------------------------------------------------------- reads

    def _check_exists(self, run_id: str) -> None:
        if not self._query(
            self._sql("SELECT 1 FROM {runs} WHERE run_id = {m}"), (self._key(run_id),)
        ):
            raise self._missing(run_id)

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record; ``RunNotFoundError`` if there is none."""
        rows = self._query(self._sql("{select} WHERE run_id = {m}"), (self._key(run_id),))
        if not rows:
            raise self._missing(run_id)
        return self._decode_run(rows[0])

    def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by status."""
        sql, params, refine = list_runs_sql(self._select_runs, status, limit, mark=self._mark)
        runs = [self._decode_run(row) for row in self._query(sql, params)]
        return [r for r in runs if r.status == status][:limit] if refine else runs

    def get_thread(self, thread_id: str) -> list[RunRecord]:
        """The runs of thread ``thread_id`` in turn order (empty for an unknown thread)."""
        rows = self._query(
            self._sql("{select} WHERE thread_id = {m} ORDER BY turn"), (self._key(thread_id),)
        )
        return [self._decode_run(row) for row in rows]

    def list_threads(self, *, limit: int = 100) -> list[RunRecord]:
        """The latest turn of each thread, newest first."""
        sql = list_threads_sql(self._select_runs, self._table("runs"), mark=self._mark)
        return [self._decode_run(row) for row in self._query(sql, (limit,))]

    def get_steps(self, run_id: str, *, start: int = 0, end: int | None = None) -> list[StepRecord]:
        """Committed steps ``start..end`` (inclusive) in order."""
        hi = _MAX_STEP if end is None else min(end, _MAX_STEP)
        rows = self._query(
            self._sql(
                "SELECT step, payload, crc FROM {steps} "
                "WHERE run_id = {m} AND step >= {m} AND step <= {m} ORDER BY step"
            ),
            (self._key(run_id), max(min(start, _MAX_STEP), -_MAX_STEP), hi),
        )
        if not rows:
            self._check_exists(run_id)  # an unknown run, or else just an empty range
        steps = [
            decode(StepRecord, payload, run_id=run_id, step=step, table="steps", crc=crc)
            for step, payload, crc in rows
        ]
        return resolve_facts(run_id, steps, lambda at: self._step(run_id, at))

    def _step(self, run_id: str, at: int) -> StepRecord | None:
        """Step ``at`` of the run (``None``: there is none)."""
        return next(iter(self.get_steps(run_id, start=at, end=at)), None)

    def snapshot_step(self, run_id: str, at_or_before: int) -> int:
        """The newest step ``<= at_or_before`` that holds a full snapshot (0 always does)."""
        rows = self._query(
            self._sql(
                "SELECT MAX(step) FROM {steps} WHERE run_id = {m} AND step <= {m} AND has_snapshot"
            ),
            (self._key(run_id), min(at_or_before, _MAX_STEP)),
        )
        found = rows[0][0] if rows else None
        if found is None:
            self._check_exists(run_id)
            return 0
        return int(found)

    def get_pending(self, run_id: str, step: int) -> list[PendingWrite]:
        """Pending writes saved for ``step``, ordered by ``(node, index)``."""
        return [
            decode(PendingWrite, payload, run_id=run_id, step=step, table="pending", crc=crc)
            for payload, crc in self._children("pending", run_id, step, "node, idx")
        ]

    def get_journal(self, run_id: str, step: int) -> list[JournalEntry]:
        """Journal entries of ``step``, ordered by ``(node, index, seq)``."""
        return [
            decode(JournalEntry, payload, run_id=run_id, step=step, table="journal", crc=crc)
            for payload, crc in self._children("journal", run_id, step, "node, idx, seq")
        ]

    def _children(self, table: str, run_id: str, step: int, order: str) -> list[Any]:
        return self._query(
            self._sql(
                f"SELECT payload, crc FROM {{{table}}} WHERE run_id = {{m}} AND step = {{m}} "
                f"ORDER BY {order}"
            ),
            (self._key(run_id), step),
        )
