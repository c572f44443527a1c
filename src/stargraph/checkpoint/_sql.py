"""What the SQL stores (``SqliteStore``, ``PostgresStore``) share: the runs row's columns and
their mapping to a :class:`RunRecord`, the status check, the fences' error messages, the
lease takeover rule, the run listing queries and the whole-run write.

Each store keeps only what differs: its placeholders (``?`` or ``%s``), how it stores text
(SQLite ``TEXT``, PostgreSQL ``bytea``) and times, and its connections.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import pydantic_core

from stargraph.checkpoint._codec import why
from stargraph.checkpoint._lease import (
    busy_error,
    effective_status,
    is_orphaned,
    lease_lost,
    owner_from,
)
from stargraph.checkpoint._records import (
    STORED_STATUSES,
    JournalEntry,
    PendingWrite,
    RunOwner,
    RunRecord,
    RunStatus,
    StepRecord,
)
from stargraph.errors import CheckpointError, CorruptCheckpointError, RunNotFoundError

if TYPE_CHECKING:
    from stargraph.checkpoint._protocol import CheckpointStore

__all__ = [
    "RELEASE",
    "RUN_COLUMNS",
    "check_status",
    "decode_run",
    "fence_error",
    "list_runs_sql",
    "list_threads_sql",
    "may_acquire",
    "missing",
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
_EXTRA_FIELDS: Final = ("error", "stopped_by", "interrupt")

RELEASE: Final = ", lease_token = NULL, lease_owner = NULL, lease_expires = NULL"
"""What a ``SET`` adds to give up the run's lease."""

_NEWEST: Final = "ORDER BY created_at DESC, run_id DESC"


def _same(value: Any) -> Any:
    return value


def check_status(run_id: str, status: str) -> None:
    """Refuse a status no store keeps."""
    if status not in STORED_STATUSES:
        raise CheckpointError(
            f"run {run_id!r}: unknown status {status!r}; use one of {sorted(STORED_STATUSES)}",
            run_id=run_id,
        )


def missing(run_id: str, where: str) -> RunNotFoundError:
    """The error for a run ``where`` (a file, a schema) does not hold."""
    return RunNotFoundError(
        f"no run {run_id!r} in {where}; list runs with store.list_runs()", run_id=run_id
    )


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
        data: dict[str, Any] = {
            name: text(value) if name in _TEXT_FIELDS else value
            for name, value in zip(_RUN_FIELDS, row, strict=False)
        }
        if row[10] is not None:
            extra = pydantic_core.from_json(blob(row[10]))
            if not isinstance(extra, dict) or not set(extra) <= set(_EXTRA_FIELDS):
                raise TypeError("the extra column is not an object of error/stopped_by/interrupt")
            data.update(extra)
        expired = False
        if row[12] is not None:
            data["owner"] = owner_from(str(row[11]), blob(row[12]))
            data["lease_expires"], expired = lease(row[13], row)
        if row[14] is not None:
            data["thread_id"], data["turn"] = text(row[14]), row[15]
        record = RunRecord.model_validate(data)
    except (ValueError, TypeError, AttributeError) as exc:  # ValidationError, Unicode ...
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step}: the runs row cannot be decoded ({why(exc)}); {damaged}",
            run_id=str(run_id),
            step=step,
        ) from exc
    status = effective_status(record.status, record.owner, expired=expired)
    return record if status == record.status else record.model_copy(update={"status": status})


def fence_error(
    row: Sequence[Any] | None,
    run_id: str,
    owner: str | None,
    step: int | None,
    *,
    where: str,
) -> CheckpointError:
    """Why a compare-and-set on ``(last_step, lease_token)`` matched no row, given the run's
    ``(last_step, lease_token, lease_owner)`` row read after it (``None``: no such run)."""
    if row is None:
        return missing(run_id, where)
    if step is not None and row[0] != step - 1:
        return CheckpointError(
            f"run {run_id!r}: step {step} cannot follow committed step {row[0]}; "
            "another writer owns this run, or history was forked",
            run_id=run_id,
            step=step,
        )
    holder = None if row[2] is None else owner_from(str(row[1]), bytes(row[2]))
    return lease_lost(run_id, owner, holder)


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
        rid, run.status, error=run.error, stopped_by=run.stopped_by, interrupt=run.interrupt
    )
