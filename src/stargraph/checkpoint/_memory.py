"""``MemoryStore``: the in-memory ``CheckpointStore``, for tests and short-lived processes."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

from stargraph.checkpoint._lease import busy_error, effective_status, is_orphaned, lease_lost
from stargraph.checkpoint._node_cache import MemoryNodeCache
from stargraph.checkpoint._protocol import StoreFeature
from stargraph.checkpoint._records import (
    ENDED_STATUSES,
    STORED_STATUSES,
    JournalEntry,
    PendingWrite,
    RunOwner,
    RunRecord,
    RunStatus,
    StepRecord,
    StepValues,
    check_status,
    check_text,
    check_thread,
    clip_error,
    iso_at,
    iso_now,
    missing,
    resolve_facts,
    trusted_fields,
    turn_taken,
)
from stargraph.errors import CheckpointError

__all__ = ["MemoryStore"]


_Advanced = tuple[int, RunStatus, str | None, str | None, object, float, str | None]
"""What a commit changes in a run's record: ``(last_step, status, error, stopped_by,
interrupt, updated, stop_reason)``, folded into it when it is next read (see
``MemoryStore._settle``)."""


def _step_at(steps: list[StepRecord], at: int) -> StepRecord | None:
    """Step number ``at`` of a run's steps (in order, numbered on from the first)."""
    index = at - steps[0].step if steps else -1
    found = steps[index] if 0 <= index < len(steps) else None
    return found if found is not None and found.step == at else None


class MemoryStore:
    """Keeps everything in dicts behind one lock. Same semantics as the SQLite store."""

    features: ClassVar[frozenset[StoreFeature]] = frozenset(
        {"releases_on_final_commit", "step_values", "node_cache"}
    )
    """``commit_step`` with status ``done`` releases the lease (a run's last step and its
    status change are one commit), and takes a step's values, kept as they are until the
    step is read (most steps of an in-memory run never are, and building two frozen
    records per step was most of a commit's cost). Not ``refer_to_facts``: ``get_steps``
    resolves such references, as every store's does, but a step kept here holds the
    engines' own unchanged dict again at no cost, while a reference would cost every read
    a copy. ``node_cache``: the graphs compiled with one store share its cached nodes'
    entries, as they share its runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, RunRecord] = {}
        # What commit_step changed in a run record, applied when the record is next read
        # (see _settle): a run commits far more often than anything reads its record, and
        # rebuilding the frozen record (and its updated_at text) was most of a commit's cost.
        self._advanced: dict[str, _Advanced] = {}
        # Deferred the same way: runs whose record, as create_run kept it, still lacks the
        # text of its lease's expiry (in _expires), and runs whose last commit released the
        # lease their record still shows.
        self._unstamped: set[str] = set()
        self._released: set[str] = set()
        self._graphs: dict[str, bytes] = {}
        self._node_cache = MemoryNodeCache()
        # A run's steps in order; those committed as values stay so until they are read.
        self._steps: dict[str, list[StepRecord | StepValues]] = {}
        self._pending: dict[tuple[str, int], dict[tuple[str, int], PendingWrite]] = {}
        self._journal: dict[tuple[str, int], dict[tuple[str, int, int], JournalEntry]] = {}
        # When each held lease lapses (time.time()), by run id.
        self._expires: dict[str, float] = {}

    def _expired(self, run_id: str) -> bool:
        return self._expires.get(run_id, float("inf")) < time.time()

    def _lease(self, run_id: str, owner: RunOwner | None) -> dict[str, object]:
        if owner is None:
            self._expires.pop(run_id, None)
            return {"owner": None, "lease_expires": None}
        expires = time.time() + owner.lease_s
        self._expires[run_id] = expires
        return {"owner": owner, "lease_expires": iso_at(expires)}

    def _fence(self, run: RunRecord, owner: str | None) -> None:
        held = run.owner.token if run.owner is not None else None
        if held != owner:
            raise lease_lost(run.run_id, owner, run.owner)

    def _shown(self, run: RunRecord) -> RunRecord:
        status = effective_status(run.status, run.owner, expired=self._expired(run.run_id))
        return run if status == run.status else run.model_copy(update={"status": status})

    def _settle(self, run_id: str) -> None:
        """Fold the fields of the commits since the run record was last read into it (and
        the lease's expiry, or its release, when those are pending too)."""
        advanced = self._advanced.pop(run_id, None)
        if advanced is None:
            return
        step, status, error, stopped_by, interrupt, at, stop_reason = advanced
        # A copy of the record's fields, as model_copy makes it (unvalidated) but cheaper.
        fields = dict(self._runs[run_id].__dict__)
        fields.update(
            last_step=step,
            status=status,
            error=error,
            stopped_by=stopped_by,
            stop_reason=stop_reason,
            interrupt=interrupt,
            updated_at=iso_at(at),
        )
        if self._unstamped and run_id in self._unstamped:
            self._unstamped.discard(run_id)
            expires = self._expires.get(run_id)
            fields["lease_expires"] = None if expires is None else iso_at(expires)
        if self._released and run_id in self._released:
            self._released.discard(run_id)
            fields.update(self._lease(run_id, None))
        self._runs[run_id] = trusted_fields(RunRecord, fields)

    def _records(self) -> list[RunRecord]:
        """Every run record, up to date."""
        for run_id in list(self._advanced):
            self._settle(run_id)
        return list(self._runs.values())

    def _run(self, run_id: str) -> RunRecord:
        if run_id in self._advanced:
            self._settle(run_id)
        try:
            return self._runs[run_id]
        except KeyError:
            raise missing(run_id, "this store") from None

    def _known(self, run_id: str) -> None:
        """Raise ``RunNotFoundError`` unless the store holds ``run_id`` (its record is not
        settled: these callers do not read it, and a run's every journal entry pays this)."""
        if run_id not in self._runs:
            self._run(run_id)

    def _built(self, run_id: str) -> list[StepRecord]:
        """The run's steps, every one a record (those kept as values built now, once).
        Called with the lock held."""
        steps = self._steps[run_id]
        built = [s if isinstance(s, StepRecord) else s.record() for s in steps]
        steps[:] = built
        return built

    def create_run(self, run: RunRecord, first: StepRecord) -> None:
        """Insert a new run with its step 0."""
        check_text(
            run.run_id,
            run_id=run.run_id,
            graph_name=run.graph_name,
            parent_run_id=run.parent_run_id,
            error=run.error,
        )
        check_status(run.run_id, run.status)
        check_thread(run)
        with self._lock:
            if run.run_id in self._runs:
                raise CheckpointError(
                    f"run {run.run_id!r} already exists; pick another run_id or resume it",
                    run_id=run.run_id,
                )
            if run.thread_id is not None:
                for other in self._records():
                    if other.thread_id == run.thread_id and other.turn == run.turn:
                        raise turn_taken(run, other.run_id)
            if run.created_at and (run.owner is not None or run.lease_expires is None):
                # The common creation (every run pays for it): the caller's record is kept
                # as it is (it is frozen), with what the store sets in it - last step,
                # update time, clipped error, lease expiry - folded in when it is next
                # read, as for a commit.
                at = time.time()
                if run.owner is None:
                    self._expires.pop(run.run_id, None)
                else:
                    self._expires[run.run_id] = at + run.owner.lease_s
                    self._unstamped.add(run.run_id)
                self._runs[run.run_id] = run
                self._advanced[run.run_id] = (
                    first.step,
                    run.status,
                    clip_error(run.error),
                    run.stopped_by,
                    run.interrupt,
                    at,
                    run.stop_reason,
                )
                self._steps[run.run_id] = [first]
                return
            now = iso_now()
            # A copy of the record's fields, as model_copy makes it (unvalidated) but
            # cheaper.
            fields = dict(run.__dict__)
            fields.update(
                created_at=run.created_at or now,
                updated_at=now,
                last_step=first.step,
                error=clip_error(run.error),
                **self._lease(run.run_id, run.owner),
            )
            self._runs[run.run_id] = trusted_fields(RunRecord, fields)
            self._steps[run.run_id] = [first]

    def acquire(self, run_id: str, owner: RunOwner, *, replace: str | None = None) -> RunRecord:
        """Lease the run to ``owner`` unless another live owner holds it."""
        with self._lock:
            run = self._run(run_id)
            held = run.owner
            if (
                held is not None
                and held.token not in (replace, owner.token)
                and not is_orphaned(held, expired=self._expired(run_id))
            ):
                raise busy_error(run_id, held, run.lease_expires)
            before = self._shown(run)
            self._runs[run_id] = run.model_copy(update=self._lease(run_id, owner))
            return before

    def heartbeat(self, run_id: str, owner: RunOwner) -> bool:
        """Renew ``owner``'s lease."""
        with self._lock:
            run = self._run(run_id)
            if run.owner is None or run.owner.token != owner.token:
                return False
            self._runs[run_id] = run.model_copy(update=self._lease(run_id, owner))
            return True

    def release(self, run_id: str, token: str) -> None:
        """Give up the lease ``token``."""
        with self._lock:
            run = self._run(run_id) if run_id in self._runs else None
            if run is not None and run.owner is not None and run.owner.token == token:
                self._runs[run_id] = run.model_copy(update=self._lease(run_id, None))

    def commit_step(
        self,
        run_id: str,
        step: StepRecord | StepValues,
        *,
        status: RunStatus = "running",
        error: str | None = None,
        stopped_by: str | None = None,
        interrupt: object = None,
        owner: str | None = None,
        stop_reason: str | None = None,
    ) -> None:
        """Append ``step`` and update the run, atomically; status ``done`` or ``halted`` (the
        run's last step) also releases the lease, as ``set_status`` does."""
        if status not in STORED_STATUSES:
            check_status(run_id, status)
        with self._lock:
            self._append(
                run_id,
                step,
                (
                    step.step,
                    status,
                    error if error is None else clip_error(error),
                    stopped_by,
                    interrupt,
                    time.time(),
                    stop_reason,
                ),
                owner,
            )

    def _append(
        self, run_id: str, step: StepRecord | StepValues, advanced: _Advanced, owner: str | None
    ) -> None:
        """Append ``step`` (number ``advanced[0]``) to the run, fenced on the lease
        ``owner``, and defer the rest of the commit (``advanced``: see ``_settle``); called
        with the lock held."""
        run = self._runs.get(run_id)
        if run is None or (self._released and run_id in self._released):
            run = self._run(run_id)  # settles a released lease; raises RunNotFoundError
        before = self._advanced.get(run_id)
        last_step = run.last_step if before is None else before[0]
        number = advanced[0]
        if number != last_step + 1:
            raise CheckpointError(
                f"run {run_id!r}: step {number} cannot follow committed step "
                f"{last_step}; another writer owns this run, or history was forked",
                run_id=run_id,
                step=number,
            )
        # Only commits defer changes, and they leave the lease alone: run.owner is the
        # current one. (_fence, inline: every step of every run pays this.)
        held = run.owner
        if (None if held is None else held.token) != owner:
            raise lease_lost(run_id, owner, held)
        self._steps[run_id].append(step)
        self._advanced[run_id] = advanced
        if self._pending:
            self._pending.pop((run_id, number), None)
        if self._journal:
            self._journal.pop((run_id, number), None)
        if advanced[1] in ENDED_STATUSES:
            # The run ends here, without the lease: gone from _expires now, and from the
            # record when it is next read.
            self._expires.pop(run_id, None)
            self._released.add(run_id)

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
        """Change a run's status fields (fenced on ``owner``; releases the lease unless
        the run goes on ``running``)."""
        check_status(run_id, status)
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run_id in self._released or run_id in self._unstamped:
                # Settled first when its lease changed since it was last read (then the
                # fence sees the owner as it is); raises RunNotFoundError.
                run = self._run(run_id)
            self._fence(run, owner)  # commits leave the lease alone: run.owner is current
            fields = dict(run.__dict__)  # a copy of its fields, as model_copy makes it
            advanced = self._advanced.pop(run_id, None)
            if advanced is not None:
                fields["last_step"] = advanced[0]  # the rest of it is set again here
            fields.update(
                status=status,
                error=clip_error(error),
                stopped_by=stopped_by,
                stop_reason=stop_reason,
                interrupt=interrupt,
                updated_at=iso_now(),
            )
            if status != "running":
                fields.update(self._lease(run_id, None))
            self._runs[run_id] = trusted_fields(RunRecord, fields)

    def set_graph(self, run_id: str, *, graph_hash: str, code_hash: str) -> None:
        """Record that the run continues under another graph."""
        with self._lock:
            run = self._run(run_id)
            self._runs[run_id] = run.model_copy(
                update={"graph_hash": graph_hash, "code_hash": code_hash, "updated_at": iso_now()}
            )

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record."""
        with self._lock:
            return self._shown(self._run(run_id))

    def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[RunRecord]:
        """Runs, newest first."""
        with self._lock:
            shown = [self._shown(r) for r in self._records()]
        runs = [r for r in shown if status is None or r.status == status]
        runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return runs[:limit]

    def put_graph(self, graph_hash: str, ir: bytes) -> None:
        """Keep a graph's IR by its hash (the first copy stays)."""
        with self._lock:
            self._graphs.setdefault(graph_hash, bytes(ir))

    def get_graph(self, graph_hash: str) -> bytes | None:
        """The IR kept for ``graph_hash``, or ``None``."""
        with self._lock:
            return self._graphs.get(graph_hash)

    def get_thread(self, thread_id: str) -> list[RunRecord]:
        """The runs of a thread in turn order."""
        with self._lock:
            runs = [self._shown(r) for r in self._records() if r.thread_id == thread_id]
        return sorted(runs, key=lambda r: r.turn or 0)

    def list_threads(self, *, limit: int = 100) -> list[RunRecord]:
        """The latest turn of each thread, newest first."""
        with self._lock:
            latest: dict[str, RunRecord] = {}
            for run in self._records():
                if run.thread_id is None:
                    continue
                seen = latest.get(run.thread_id)
                if seen is None or (seen.turn or 0) < (run.turn or 0):
                    latest[run.thread_id] = run
            shown = [self._shown(r) for r in latest.values()]
        shown.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return shown[:limit]

    def get_steps(self, run_id: str, *, start: int = 0, end: int | None = None) -> list[StepRecord]:
        """Committed steps ``start..end``."""
        with self._lock:
            self._known(run_id)
            steps = self._built(run_id)
        chosen = [s for s in steps if s.step >= start and (end is None or s.step <= end)]
        return resolve_facts(run_id, chosen, lambda at: _step_at(steps, at))

    def snapshot_step(self, run_id: str, at_or_before: int) -> int:
        """Newest snapshot step at or before ``at_or_before``."""
        with self._lock:
            self._known(run_id)
            found = [
                s.step
                for s in self._built(run_id)
                if s.snapshot is not None and s.step <= at_or_before
            ]
        return max(found, default=0)

    def put_pending(self, run_id: str, write: PendingWrite) -> None:
        """Save one finished task's writes."""
        check_text(run_id, node=write.node)
        with self._lock:
            self._known(run_id)
            bucket = self._pending.setdefault((run_id, write.step), {})
            bucket.setdefault((write.node, write.index), write)

    def get_pending(self, run_id: str, step: int) -> list[PendingWrite]:
        """Pending writes of ``step``."""
        with self._lock:
            bucket = dict(self._pending.get((run_id, step), {}))
        return [bucket[k] for k in sorted(bucket)]

    def append_journal(self, run_id: str, entry: JournalEntry, *, replace: bool = False) -> None:
        """Record one call (``replace``: over an entry already at its position)."""
        check_text(run_id, node=entry.node, kind=entry.kind, key=entry.key)
        with self._lock:
            self._known(run_id)
            bucket = self._journal.setdefault((run_id, entry.step), {})
            if replace:
                bucket[(entry.node, entry.index, entry.seq)] = entry
            else:
                bucket.setdefault((entry.node, entry.index, entry.seq), entry)

    def get_journal(self, run_id: str, step: int) -> list[JournalEntry]:
        """Journal entries of ``step``."""
        with self._lock:
            bucket = dict(self._journal.get((run_id, step), {}))
        return [bucket[k] for k in sorted(bucket)]

    def node_cache(self) -> MemoryNodeCache:
        """The entries of the cached nodes of graphs compiled with this store (feature
        ``node_cache``): kept as long as the store object."""
        return self._node_cache

    def close(self) -> None:
        """Nothing to release."""
