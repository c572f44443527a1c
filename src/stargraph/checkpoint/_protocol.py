"""The ``CheckpointStore`` protocol: the one seam between the executor and storage."""

from __future__ import annotations

from typing import Final, Literal, Protocol, runtime_checkable

from stargraph.checkpoint._records import (
    JournalEntry,
    PendingWrite,
    RunOwner,
    RunRecord,
    RunStatus,
    StepRecord,
)

__all__ = ["CheckpointStore", "StoreFeature", "features_of"]

StoreFeature = Literal[
    "releases_on_final_commit", "refer_to_facts", "step_values", "write_run", "node_cache"
]
"""What a store may declare in its ``features`` (see :class:`CheckpointStore`)."""

_NONE: Final[frozenset[StoreFeature]] = frozenset()


def features_of(store: object) -> frozenset[StoreFeature]:
    """The features ``store`` declares (none for a store without a ``features`` attribute,
    such as one written before features existed: it gets the plain protocol)."""
    return frozenset(getattr(store, "features", _NONE))


@runtime_checkable
class CheckpointStore(Protocol):
    """Durable storage of runs. Every method is atomic; ``commit_step`` is one transaction.

    Implementations must pass ``stargraph.checkpoint.conformance`` and be safe to share
    between threads. Errors are :class:`~stargraph.errors.CheckpointError` subclasses:
    ``RunNotFoundError`` for an unknown run, ``CorruptCheckpointError`` (naming run and step)
    for a payload that cannot be decoded, ``CheckpointError`` for a conflicting write such as
    a second commit of the same step (which is how two writers are fenced apart).

    Leases: a run has at most one owner (:class:`RunOwner`). ``create_run`` with
    ``run.owner`` set, or ``acquire``, takes the lease; ``set_status`` to anything but
    ``running``, or ``release``, gives it up. ``set_status`` and ``commit_step`` are a
    compare-and-set on the owner: they apply only when ``owner=`` is the token of the run's
    current lease (``None``: the run has no owner), else they change nothing and raise
    ``LeaseLostError`` (or ``RunBusyError`` for a writer without a lease). ``get_run`` and
    ``list_runs`` report a ``running`` run whose owner is gone as ``orphaned``. Stored text
    must be valid Unicode (a run id with a lone surrogate is refused with a
    ``CheckpointError`` naming it); a stored ``error`` is cut to ``MAX_ERROR_CHARS``.

    Features: a store may declare ``features``, a frozenset of :data:`StoreFeature` names
    (a store without the attribute declares none, and the runtime then uses only the
    methods below), read once per run:

    - ``"releases_on_final_commit"``: ``commit_step`` with status ``done`` or ``halted``
      releases the lease as ``set_status`` does, so the runtime ends a run in its last
      commit instead of a status change of its own;
    - ``"refer_to_facts"``: the runtime writes a step's unchanged rule facts as
      ``StepRecord.facts_from`` (the step holding them), which ``get_steps`` resolves;
    - ``"step_values"``: ``commit_step`` also takes a :class:`StepValues` in place of the
      ``StepRecord`` (the runtime then builds no record; the store gives the record back
      when the step is read);
    - ``"write_run"``: the store has ``write_run(run, steps, *, pending, journal, graph)``,
      which writes a whole run (an ``exit``-mode run) in one transaction;
    - ``"node_cache"``: the store has ``node_cache()``, the one object (with
      ``get(key) -> (writes, stored_at) | None`` and ``put(key, writes, stored_at)``) where
      graphs compiled with it keep their cached nodes' writes; a store without it gets a
      cache in memory, owned by each graph compiled with it.

    The conformance suite checks that what a store declares behaves so. It is not a
    protocol member, so ``isinstance(store, CheckpointStore)`` holds for a store without it.

    Threads: a run created with ``thread_id`` and ``turn`` is that turn of that thread; a
    store holds at most one run per ``(thread_id, turn)`` and refuses a second with
    ``ThreadBusyError`` (how two callers starting the same turn are fenced apart).
    """

    def create_run(self, run: RunRecord, first: StepRecord) -> None:
        """Insert a new run with its step 0, atomically. Raises if the run id exists (or,
        for a turn of a thread, ``ThreadBusyError`` if that turn exists). With
        ``run.owner`` set, the new run is leased to that owner."""
        ...

    def acquire(self, run_id: str, owner: RunOwner, *, replace: str | None = None) -> RunRecord:
        """Lease the run to ``owner`` if nobody holds it, its owner is gone (see
        ``orphaned``), or its lease token is ``replace``; otherwise raise ``RunBusyError``
        naming the holder. Returns the run's record as it was just before (status and
        interrupt unchanged: the new owner sets them)."""
        ...

    def heartbeat(self, run_id: str, owner: RunOwner) -> bool:
        """Renew ``owner``'s lease for another ``owner.lease_s``; ``False`` if it is not the
        run's lease any more."""
        ...

    def release(self, run_id: str, token: str) -> None:
        """Give up the lease ``token`` without changing the status (no-op if not held)."""
        ...

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
        Fenced on ``owner`` (the lease token). The lease is kept, except that status ``done``
        or ``halted`` (the run's last step and its end in one commit) releases it as
        ``set_status`` does (a store that does so declares the feature
        ``releases_on_final_commit``)."""
        ...

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
        """Change a run's status without committing a step (interrupt, fail, finish). Fenced on
        ``owner``; any status but ``running`` also releases the lease. ``stop_reason``: why
        the rule ``stopped_by`` ended the run (a ``halted`` run, or ``done`` by a rule)."""
        ...

    def set_graph(self, run_id: str, *, graph_hash: str, code_hash: str) -> None:
        """Record that the run continues under another graph (an explicit migration)."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record; ``RunNotFoundError`` if there is none."""
        ...

    def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by status."""
        ...

    def put_graph(self, graph_hash: str, ir: bytes) -> None:
        """Keep the IR (canonical JSON) of graph ``graph_hash``, once per hash (idempotent):
        what a run's ``graph_hash`` names, so any process can load the graph of a stored run."""
        ...

    def get_graph(self, graph_hash: str) -> bytes | None:
        """The IR kept by :meth:`put_graph` for ``graph_hash``, or ``None``."""
        ...

    def get_thread(self, thread_id: str) -> list[RunRecord]:
        """The runs of thread ``thread_id`` in turn order (empty for an unknown thread)."""
        ...

    def list_threads(self, *, limit: int = 100) -> list[RunRecord]:
        """The latest turn of each thread, newest first."""
        ...

    def get_steps(self, run_id: str, *, start: int = 0, end: int | None = None) -> list[StepRecord]:
        """Committed steps ``start..end`` (inclusive) in order. A store that declares
        ``refer_to_facts`` gives each step written with ``facts_from`` back with the facts
        of the step it names, whatever the range; any other store gets facts in full."""
        ...

    def snapshot_step(self, run_id: str, at_or_before: int) -> int:
        """The newest step ``<= at_or_before`` that holds a full snapshot (0 always does)."""
        ...

    def put_pending(self, run_id: str, write: PendingWrite) -> None:
        """Save one finished task's writes for a step not yet committed (idempotent)."""
        ...

    def get_pending(self, run_id: str, step: int) -> list[PendingWrite]:
        """Pending writes saved for ``step``, ordered by ``(node, index)``."""
        ...

    def append_journal(self, run_id: str, entry: JournalEntry, *, replace: bool = False) -> None:
        """Record one call of a task execution (idempotent on its position: the first entry
        recorded there stays, unless ``replace``, used for an interrupt's answer that no
        node has read yet)."""
        ...

    def get_journal(self, run_id: str, step: int) -> list[JournalEntry]:
        """Journal entries of ``step``, ordered by ``(node, index, seq)``."""
        ...

    def close(self) -> None:
        """Release connections. The store is unusable afterwards."""
        ...
