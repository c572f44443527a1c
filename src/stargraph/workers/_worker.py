"""``Worker``: claims queued runs under a lease and runs them to their end, durably.

A run is invoked if it never started and resumed from its last checkpoint otherwise, so a
worker that dies mid-run costs at most the step it was in: when its lease expires another
worker claims the run and resumes it. Two workers can never both write a step: the store's
``commit_step`` is a compare-and-set on the run's last step, and a worker whose lease was
taken over stops writing at its next store call (its store is fenced by the lease) and
leaves the run to its new owner. A run whose worker died ``max_attempts`` times (claimed
more often than that) is dead-lettered with the reason instead of being run again.

A worker asked to stop with ``cancel=True`` (SIGTERM or Ctrl-C under ``run(handle_signals=
True)``, which ``python -m stargraph.workers`` uses) does not wait for its run to end: the
run stops at its next step boundary as ``cancelled`` and goes back to the queue, where
another worker resumes it from that step. A second signal stops the worker at once (the run
is then orphaned, and taken over when its claim lapses).

A database that goes away (a lost connection, ``pg_terminate_backend``, a server restart)
does not fail the run: what was committed is intact, so the worker waits for the database
with backoff and resumes the run from its last committed step (a step cut off mid-commit
runs again; effects keyed by ``ctx.idempotency_key`` happen once). An idle worker keeps
polling until the database is back.

A graph whose nodes reach for live objects (a chat model, a tool arbiter) gets them from the
worker: ``Worker(db, services=...)`` takes a mapping, or a function returning one that the
worker calls once (model clients and arbiters hold connections and threads, so each worker
process makes its own); every graph the worker runs is compiled with them. A node that asks
for a service the worker was not given fails its run with a
:class:`~stargraph.errors.MissingServiceError` that names the node, the key and how to give
the worker its services.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from stargraph._lifecycle import Closing
from stargraph.checkpoint import (
    CheckpointStore,
    JournalEntry,
    PendingWrite,
    RunOwner,
    RunRecord,
    StepRecord,
)
from stargraph.checkpoint._node_cache import NodeCache, node_cache_of
from stargraph.checkpoint._protocol import StoreFeature, features_of
from stargraph.checkpoint._records import ENDED_STATUSES
from stargraph.errors import (
    CheckpointError,
    GraphHashMismatch,
    LeaseLostError,
    MissingServiceError,
    RunCancelledError,
    StargraphError,
    StoreUnavailableError,
)
from stargraph.workers._queue import (
    Claim,
    RunQueue,
    is_postgres,
    open_queue,
    worker_name,
)

__all__ = [
    "LeaseLostError",
    "Outcome",
    "Services",
    "Worker",
    "load_graph",
    "load_services",
    "submit",
]

log = logging.getLogger("stargraph.workers")

Outcome = Literal["done", "failed", "interrupted", "dead", "lost", "requeued"]

_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 2.0
"""Backoff between tries while the database is unavailable."""


Services = Mapping[str, Any] | Callable[[], Mapping[str, Any]]
"""What ``Worker(services=)`` takes: the services mapping, or a function returning it."""

_PIN = "@"
"""Separates a queued graph reference from the graph hash it was submitted with."""


def split_ref(graph_ref: str) -> tuple[str, str | None]:
    """``(module:attr, graph hash or None)`` of a queued graph reference."""
    ref, pin, graph_hash = graph_ref.partition(_PIN)
    return ref, graph_hash if pin else None


def load_graph(graph_ref: str) -> Any:
    """Import ``module:attr``: a ``Graph`` or a ``CompiledGraph``, or a function returning
    one (a trailing ``@<graph hash>`` pin is ignored)."""
    from stargraph.graph import Graph
    from stargraph.runtime import CompiledGraph

    graph_ref, _ = split_ref(graph_ref)
    module_name, _, attr = graph_ref.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise CheckpointError(f"cannot load graph {graph_ref!r}: {exc}") from exc
    if not isinstance(target, Graph | CompiledGraph) and callable(target):
        target = target()
    if not isinstance(target, Graph | CompiledGraph):
        raise CheckpointError(
            f"graph {graph_ref!r} is a {type(target).__name__}, not a Graph, a CompiledGraph "
            "or a function returning one"
        )
    return target


def load_services(ref: str) -> Services:
    """Import ``module:attr`` naming a services mapping or a function returning one, for
    ``Worker(services=)`` (the worker calls the function once)."""
    module_name, colon, attr = ref.partition(":")
    if not colon or not module_name or not attr:
        raise CheckpointError(
            f"services reference {ref!r} must be 'package.module:function' naming a function "
            "that returns the services mapping (or the mapping itself)"
        )
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise CheckpointError(f"cannot load services {ref!r}: {exc}") from exc
    if not isinstance(target, Mapping) and not callable(target):
        raise CheckpointError(
            f"services {ref!r} is a {type(target).__name__}, not a mapping or a function "
            "returning one"
        )
    return target  # type: ignore[no-any-return]


def submit(
    db: str | Path,
    graph_ref: str,
    input: Any = None,
    *,
    run_id: str | None = None,
    max_attempts: int = 3,
    schema: str = "stargraph",
    graph_hash: str | None = None,
) -> str:
    """Queue a run of ``graph_ref`` (``"module:attr"`` naming a ``Graph``, a
    ``CompiledGraph`` or a function returning one) on ``db`` (a ``postgresql://`` DSN or a
    SQLite file); returns the run id. Workers on the same ``db`` pick it up and compile the
    graph with their services. With ``graph_hash``, a worker whose graph hashes otherwise
    (other code) refuses the run with :class:`~stargraph.errors.GraphHashMismatch`."""
    if graph_hash is not None:
        graph_ref = f"{split_ref(graph_ref)[0]}{_PIN}{graph_hash}"
    queue = open_queue(db, schema=schema)
    try:
        return queue.submit(graph_ref, input, run_id=run_id, max_attempts=max_attempts)
    finally:
        queue.close()


def _missing_service(exc: StargraphError, services: Mapping[str, Any]) -> str | None:
    """The service key a failed node asked for and the worker lacks, if that is why."""
    if isinstance(exc, MissingServiceError) and exc.service not in services:
        return exc.service
    return None


def _missing_service_error(
    exc: MissingServiceError, key: str, graph_ref: str
) -> MissingServiceError:
    return MissingServiceError(
        f"node {exc.node!r} of run {exc.run_id!r} (graph {graph_ref}) needs "
        f"services[{key!r}], which this worker was not given; give the worker its services: "
        f"Worker(db, services={{{key!r}: ...}}) or a function returning them, or "
        f"`stargraph worker --services module:fn` where fn() returns the mapping",
        service=key,
        run_id=exc.run_id,
        step=exc.step,
        node=exc.node,
    )


class _FencedStore:
    """A store that refuses every write once the lease it runs under is lost."""

    def __init__(self, inner: CheckpointStore, lease: _Lease) -> None:
        self._inner = inner
        self._lease = lease

    @property
    def features(self) -> frozenset[StoreFeature]:
        """The wrapped store's features but ``write_run`` (a worker's run is ``sync``); the
        fence still refuses a final commit once the lease is lost, as it refuses every
        other write."""
        return features_of(self._inner) - {"write_run"}

    def node_cache(self) -> NodeCache:
        """The wrapped store's node cache, unfenced: an entry is a node's writes for an
        input, as true after the lease is lost as before (declared when the store's is)."""
        return node_cache_of(self._inner)

    def _check(self, run_id: str) -> None:
        if self._lease.lost.is_set():
            raise LeaseLostError(
                f"run {run_id!r}: this worker's lease was taken over by another worker; "
                "it stops and leaves the run to its new owner",
                run_id=run_id,
            )

    def create_run(self, run: RunRecord, first: StepRecord) -> None:
        self._check(run.run_id)
        self._inner.create_run(run, first)

    def commit_step(self, run_id: str, step: StepRecord, **kwargs: Any) -> None:
        self._check(run_id)
        self._inner.commit_step(run_id, step, **kwargs)

    def set_status(self, run_id: str, status: Any, **kwargs: Any) -> None:
        self._check(run_id)
        self._inner.set_status(run_id, status, **kwargs)

    def set_graph(self, run_id: str, *, graph_hash: str, code_hash: str) -> None:
        self._check(run_id)
        self._inner.set_graph(run_id, graph_hash=graph_hash, code_hash=code_hash)

    def put_pending(self, run_id: str, write: PendingWrite) -> None:
        self._check(run_id)
        self._inner.put_pending(run_id, write)

    def append_journal(self, run_id: str, entry: JournalEntry, *, replace: bool = False) -> None:
        self._check(run_id)
        self._inner.append_journal(run_id, entry, replace=replace)

    def acquire(self, run_id: str, owner: RunOwner, *, replace: str | None = None) -> RunRecord:
        self._check(run_id)
        # The queue claim outranks the run's lease: whoever held it before lost its claim
        # (it died or hung past its queue lease), so its run lease is taken over too.
        held = self._inner.get_run(run_id).owner
        return self._inner.acquire(run_id, owner, replace=replace if held is None else held.token)

    def heartbeat(self, run_id: str, owner: RunOwner) -> bool:
        return not self._lease.lost.is_set() and self._inner.heartbeat(run_id, owner)

    def release(self, run_id: str, token: str) -> None:
        self._inner.release(run_id, token)

    def get_run(self, run_id: str) -> RunRecord:
        return self._inner.get_run(run_id)

    def list_runs(self, *, status: Any = None, limit: int = 100) -> list[RunRecord]:
        return self._inner.list_runs(status=status, limit=limit)

    def get_thread(self, thread_id: str) -> list[RunRecord]:
        return self._inner.get_thread(thread_id)

    def put_graph(self, graph_hash: str, ir: bytes) -> None:
        self._inner.put_graph(graph_hash, ir)

    def get_graph(self, graph_hash: str) -> bytes | None:
        return self._inner.get_graph(graph_hash)

    def list_threads(self, *, limit: int = 100) -> list[RunRecord]:
        return self._inner.list_threads(limit=limit)

    def get_steps(self, run_id: str, *, start: int = 0, end: int | None = None) -> list[StepRecord]:
        return self._inner.get_steps(run_id, start=start, end=end)

    def snapshot_step(self, run_id: str, at_or_before: int) -> int:
        return self._inner.snapshot_step(run_id, at_or_before)

    def get_pending(self, run_id: str, step: int) -> list[PendingWrite]:
        return self._inner.get_pending(run_id, step)

    def get_journal(self, run_id: str, step: int) -> list[JournalEntry]:
        return self._inner.get_journal(run_id, step)

    def close(self) -> None:
        """The worker owns the inner store; closing the fence closes nothing."""


@dataclass(eq=False)
class _Lease:
    """Heartbeats for one claim on a background thread; ``lost`` is set when renewal fails."""

    queue: RunQueue
    claim: Claim
    owner: str
    lease_s: float
    heartbeat_s: float
    lost: threading.Event = field(default_factory=threading.Event, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(
            target=self._beat, name=f"heartbeat-{self.claim.run_id}", daemon=True
        )

    def __enter__(self) -> _Lease:
        if self.heartbeat_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                if not self.queue.renew(self.claim, self.owner, self.lease_s):
                    self.lost.set()
                    return
            except StargraphError as exc:  # the database is unreachable: keep trying
                log.warning("heartbeat of run %s failed: %s", self.claim.run_id, exc)


class Worker(Closing):
    """Claims runs from the queue on ``db`` and runs them (``postgresql://`` DSN or SQLite file).

    ``lease_s`` is how long a claim lasts without a heartbeat (a dead worker's runs are taken
    over after that); heartbeats renew it every ``heartbeat_s`` (default ``lease_s / 3``).
    Idle workers wait for a ``NOTIFY`` from ``submit`` (PostgreSQL) or poll (SQLite), and look
    for expired leases every ``poll_s``.

    ``services`` (a mapping, or a function returning one, called once here) are the live
    objects the graphs' nodes reach through ``ctx.services`` (``{"model": ..., "arbiter":
    ...}``); every graph the worker runs is compiled with them, a ``CompiledGraph`` keeping
    those it was compiled with for any key the worker does not give. Those a function made
    are the worker's: :meth:`close` closes them.
    """

    def __init__(
        self,
        db: str | Path,
        *,
        schema: str = "stargraph",
        lease_s: float = 30.0,
        heartbeat_s: float | None = None,
        poll_s: float = 1.0,
        name: str | None = None,
        pool_size: int = 4,
        services: Services | None = None,
    ) -> None:
        if lease_s <= 0:
            raise CheckpointError(f"lease_s must be positive, got {lease_s}")
        self.db = db
        self.lease_s = float(lease_s)
        self.heartbeat_s = self.lease_s / 3 if heartbeat_s is None else float(heartbeat_s)
        self.poll_s = float(poll_s)
        self.name = name or worker_name()
        self.queue = open_queue(db, schema=schema)
        self.store: CheckpointStore
        try:
            if is_postgres(db):
                from stargraph.checkpoint import PostgresStore

                self.store = PostgresStore(str(db), schema=schema, pool_size=pool_size)
            else:
                from stargraph.checkpoint import SqliteStore

                self.store = SqliteStore(db)
        except BaseException:
            self.queue.close()
            raise
        try:
            self.services, self._owned = _resolve_services(services)
        except BaseException:
            self.queue.close()
            self.store.close()
            raise
        self._graphs: dict[str, Any] = {}
        self._stop = threading.Event()
        self._cancelling = False
        # The run in progress (its graph and id), for stop(cancel=True).
        self._current: tuple[Any, str] | None = None
        self.processed = 0

    # ----------------------------------------------------------------- one run

    def claim(self) -> Claim | None:
        """Claim the next run (without running it)."""
        return self.queue.claim(self.name, self.lease_s)

    def process(self, claim: Claim) -> Outcome:
        """Run a claimed run to its end under heartbeats; return what became of it."""
        if claim.attempts > claim.max_attempts:
            reason = (
                f"dead-lettered: claimed {claim.attempts} times, more than max_attempts="
                f"{claim.max_attempts}; each earlier worker lost its lease mid-run (it died, "
                "was killed or hung), so this run is likely what kills its worker"
            )
            log.error("run %s %s", claim.run_id, reason)
            return "dead" if self.queue.finish(claim, "dead", reason) else "lost"
        with _Lease(self.queue, claim, self.name, self.lease_s, self.heartbeat_s) as lease:
            outcome, why = self._execute(claim, lease)
            if outcome == "lost" or lease.lost.is_set():
                log.warning("run %s: lease lost to another worker; stopping", claim.run_id)
                return "lost"
            if outcome == "requeued":
                log.warning("run %s: %s", claim.run_id, why)
                requeued = self._queue_write(claim, lambda: self.queue.requeue(claim, why))
                return "requeued" if requeued else "lost"
            if not self._queue_write(claim, lambda: self.queue.finish(claim, outcome, why)):
                return "lost"
        self.processed += 1
        return outcome

    def _retry_wait(self, delay: float, what: str, exc: StoreUnavailableError) -> float | None:
        """Wait ``delay`` before the next try while the database is unavailable; the next
        delay, or ``None`` when :meth:`stop` was called meanwhile."""
        log.warning("%s: the database is unavailable (%s); retrying in %.2fs", what, exc, delay)
        if self._stop.wait(delay):
            return None
        return min(delay * 2, _RETRY_MAX_S)

    def _queue_write(self, claim: Claim, write: Callable[[], bool]) -> bool:
        """Record a claim's outcome in the queue (``write``), retrying while the database
        is unavailable; ``False`` if the claim was lost."""
        delay = _RETRY_FIRST_S
        while True:
            try:
                return write()
            except StoreUnavailableError as exc:
                next_delay = self._retry_wait(delay, f"run {claim.run_id}", exc)
                if next_delay is None:
                    return False  # stopping: the claim lapses and another worker finishes it
                delay = next_delay

    def _compiled(self, graph_ref: str, store: CheckpointStore, run_id: str) -> Any:
        from stargraph.runtime import CompiledGraph

        ref, pinned = split_ref(graph_ref)
        graph = self._graphs.get(ref)
        if graph is None:
            graph = self._graphs[ref] = load_graph(ref)
        if isinstance(graph, CompiledGraph):
            app: Any = graph.with_store(store)
            if self.services:
                # The worker's services win over those the graph was compiled with (clients
                # made at import time, in the submitting process's image of the code).
                app = _with_services(app, self.services, store)
        else:
            app = graph.compile(store=store, services=self.services)
        if pinned is not None and app.graph_hash != pinned:
            app.close()
            raise GraphHashMismatch(run_id=run_id, stored=pinned, current=app.graph_hash)
        return app

    def _execute(self, claim: Claim, lease: _Lease) -> tuple[Outcome, str | None]:
        fenced = _FencedStore(self.store, lease)
        try:
            app = self._compiled(claim.graph_ref, fenced, claim.run_id)
        except GraphHashMismatch as exc:
            return "failed", (
                f"GraphHashMismatch: run {claim.run_id!r} was submitted with graph "
                f"{exc.stored} but {split_ref(claim.graph_ref)[0]} builds {exc.current} in "
                "this worker; run the worker on the code the run was submitted from"
            )
        except StargraphError as exc:
            return "failed", f"{type(exc).__name__}: {exc}"
        # stop(cancel=True) reaches the run through it (a signal reaches every run anyway,
        # also one that is just starting).
        self._current = (app, claim.run_id)
        try:
            delay = _RETRY_FIRST_S
            while True:
                if self._cancelling:
                    return "requeued", "its worker stopped before running it; queued again"
                try:
                    record = self._run_once(app, claim)
                    break
                except StoreUnavailableError as exc:
                    # The database went away mid-run: what it committed is intact, so wait
                    # for it and resume the run from there (a new connection each try).
                    if lease.lost.is_set():
                        return "lost", None
                    next_delay = self._retry_wait(delay, f"run {claim.run_id}", exc)
                    if next_delay is None:
                        return "lost", None  # stopping: the claim lapses, another resumes
                    delay = next_delay
        except LeaseLostError:
            return "lost", None
        except RunCancelledError as exc:
            if exc.run_id != claim.run_id:  # a nested run a node invoked was cancelled
                return "failed", f"{type(exc).__name__}: {exc}"
            # stop(cancel=True): the run stopped at a step boundary; another worker resumes it.
            return "requeued", (
                f"its worker stopped ({exc.reason}); cancelled after step {exc.step} and "
                "queued again"
            )
        except CheckpointError as exc:
            # A refused commit (another writer advanced the run) or a run created meanwhile
            # means this worker no longer owns the run; anything else is a real failure.
            if lease.lost.is_set() or not self._still_owner(claim):
                return "lost", None
            return "failed", f"{type(exc).__name__}: {exc}"
        except StargraphError as exc:
            if lease.lost.is_set():
                return "lost", None
            key = _missing_service(exc, self.services)
            if key is not None and isinstance(exc, MissingServiceError):
                missing = _missing_service_error(exc, key, split_ref(claim.graph_ref)[0])
                self._record_failure(claim, missing)
                return "failed", f"{type(missing).__name__}: {missing}"
            return "failed", f"{type(exc).__name__}: {exc}"
        finally:
            self._current = None
            app.close()
        if record.status in ENDED_STATUSES:  # halted by a rule: it ended, nothing to redo
            return "done", None
        if record.status == "interrupted":
            return "interrupted", "waiting for a response: resume it with resume(run_id, ...)"
        if record.status == "failed":
            return "failed", record.error
        return "failed", f"the run stopped with status {record.status!r}"

    def _run_once(self, app: Any, claim: Claim) -> RunRecord:
        """Invoke the run if it never started, resume it if it stopped part-way; its record
        afterwards. Asked again after a database outage, it picks up where the run is."""
        try:
            status: str | None = self.store.get_run(claim.run_id).status
        except LookupError:
            status = None
        if status is None:
            app.invoke(claim.input, run_id=claim.run_id)
        elif status in ("pending", "running", "orphaned", "cancelled"):
            app.resume(claim.run_id)
        return self.store.get_run(claim.run_id)

    def _record_failure(self, claim: Claim, exc: StargraphError) -> None:
        """Put ``exc`` on the failed run's record in place of the error it failed with."""
        try:
            self.store.set_status(claim.run_id, "failed", error=str(exc))
        except StargraphError as err:  # the queue still says why; the record keeps its own
            log.warning("run %s: cannot record %s: %s", claim.run_id, type(exc).__name__, err)

    def _still_owner(self, claim: Claim) -> bool:
        try:
            return self.queue.renew(claim, self.name, self.lease_s)
        except StargraphError:
            return False

    # ----------------------------------------------------------------- the loop

    def run_once(self) -> Outcome | None:
        """Claim and process one run; ``None`` if nothing was claimable."""
        claim = self.claim()
        return None if claim is None else self.process(claim)

    def run(
        self,
        *,
        max_runs: int | None = None,
        idle_exit_s: float | None = None,
        on_outcome: Callable[[str, Outcome], None] | None = None,
        handle_signals: bool = False,
    ) -> int:
        """Process runs until :meth:`stop`, ``max_runs`` runs, or ``idle_exit_s`` without
        work; returns how many runs this call processed. ``handle_signals`` (main thread
        only): the first SIGINT or SIGTERM is ``stop(cancel=True)`` - the run in progress
        goes back to the queue at its next step boundary - and a second one stops at once
        (see :func:`stargraph.runtime.cancel_on_signals`)."""
        if handle_signals:
            from stargraph.runtime import cancel_on_signals

            with cancel_on_signals(on_signal=lambda _: self.stop(cancel=True)):
                return self.run(max_runs=max_runs, idle_exit_s=idle_exit_s, on_outcome=on_outcome)
        count = 0
        idle_since = time.monotonic()
        delay = _RETRY_FIRST_S
        while not self._stop.is_set() and (max_runs is None or count < max_runs):
            try:
                claim = self.claim()
            except StoreUnavailableError as exc:
                # Not idle: the database is away (a restart); wait for it with backoff.
                next_delay = self._retry_wait(delay, f"worker {self.name}", exc)
                if next_delay is None:
                    break
                delay = next_delay
                idle_since = time.monotonic()
                continue
            delay = _RETRY_FIRST_S
            if claim is None:
                if idle_exit_s is not None and time.monotonic() - idle_since >= idle_exit_s:
                    break
                wait = self.poll_s
                if idle_exit_s is not None:
                    wait = min(wait, max(0.01, idle_exit_s - (time.monotonic() - idle_since)))
                self.queue.wait(wait)
                continue
            outcome = self.process(claim)
            count += 1
            if on_outcome is not None:
                on_outcome(claim.run_id, outcome)
            idle_since = time.monotonic()
        return count

    def stop(self, *, cancel: bool = False) -> None:
        """Ask :meth:`run` to return after the current run; with ``cancel``, without waiting
        for it to end: it stops at its next step boundary (``cancelled``) and goes back to
        the queue, where another worker resumes it from there. Safe from any thread and
        from a signal handler."""
        self._cancelling = self._cancelling or cancel
        self._stop.set()
        current = self._current
        if cancel and current is not None:
            app, run_id = current
            app.cancel(run_id, reason="its worker is stopping")
            log.info("worker %s is stopping: run %s goes back to the queue", self.name, run_id)

    def close(self) -> None:
        """Close the queue, the store and the services the worker made."""
        self.queue.close()
        self.store.close()
        for service in self._owned:
            close = getattr(service, "close", None)
            if callable(close):
                close()


def _resolve_services(services: Services | None) -> tuple[Mapping[str, Any], tuple[Any, ...]]:
    """The services mapping, and the objects in it the worker owns (a function made them)."""
    if services is None:
        return {}, ()
    if isinstance(services, Mapping):
        return dict(services), ()
    if not callable(services):
        raise CheckpointError(
            f"Worker(services=) takes a mapping or a function returning one, not a "
            f"{type(services).__name__}"
        )
    name = getattr(services, "__qualname__", repr(services))
    try:
        made = services()
    except StargraphError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"the services function {name} raised {type(exc).__name__}: {exc}; the worker "
            "cannot start without its services - fix the function (it runs in the worker's "
            "process, with its environment)"
        ) from exc
    if not isinstance(made, Mapping):
        raise CheckpointError(
            f"the services function {name} returned a {type(made).__name__}, not a mapping "
            "of service names to objects; return e.g. {'model': ..., 'arbiter': ...}"
        )
    return dict(made), tuple(made.values())


def _with_services(app: Any, services: Mapping[str, Any], store: CheckpointStore) -> Any:
    """``app`` compiled again with ``services`` over its own."""
    from stargraph.graph import Graph

    merged = {**app.services, **services}
    app.close()
    return Graph(app.ir).compile(store=store, services=merged)
