"""Durability: the bridge between a run and its checkpoint store.

``Persistence`` writes what the executor does - step 0, every committed step (one
transaction each), pending writes of finished siblings, journal entries, status changes - and
``load_run`` reads a run back for resume, fork and time travel. Durability modes:

- ``sync`` (default): each step is committed before the next starts. A crash loses at most the
  step in flight, and of that only the tasks that had not finished.
- ``exit``: the run is kept in memory and written when it finishes, fails or is interrupted.
  Faster, but a crash loses the whole run.

One owner per run: ``start`` creates the run leased to this process and a resume takes the
lease (``_stored.load``) before any node runs; every commit and status change is a
compare-and-set on the lease, and an interrupt, finishing or failing releases it (see
``stargraph.checkpoint._lease``). A second resumer gets ``RunBusyError`` at once.

Guarantee, stated honestly: steps are *at-least-once* - a task interrupted by a crash runs
again on resume. Effects made through ``ctx.once`` / ``ctx.now`` / ``ctx.uuid`` /
``ctx.random`` are recorded and not repeated once recorded; effects keyed by
``ctx.idempotency_key`` at their destination are exactly-once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Final, Literal, Protocol

import pydantic_core
from pydantic import ValidationError

from stargraph.checkpoint import (
    CheckpointStore,
    JournalEntry,
    MemoryStore,
    PendingWrite,
    RunRecord,
    StepRecord,
    StepValues,
    TaskRecord,
)
from stargraph.checkpoint._compact import (
    Conversations,
    Deltas,
    ToolResults,
    compact_call,
    compact_calls,
    expand_steps,
)
from stargraph.checkpoint._lease import DEFAULT_LEASE_S, Lease, new_owner
from stargraph.checkpoint._protocol import features_of
from stargraph.checkpoint._records import iso_now, trusted_fields, unicode_problem
from stargraph.errors import (
    CheckpointError,
    CorruptCheckpointError,
    InvalidInputError,
    InvalidWriteError,
    LeaseLostError,
    RunBusyError,
    _RunAt,
)
from stargraph.runtime._interrupts import RuleDecision
from stargraph.runtime._plan import Plan, Task
from stargraph.runtime._rules import RuleSet
from stargraph.runtime._values import ROUTING_KEYS, jsonable, reduce_writes
from stargraph.state import Channel

__all__ = [
    "Durability",
    "Persistence",
    "Progress",
    "atake_lease",
    "check_run_id",
    "check_values",
    "load_journal",
    "load_values",
    "take_lease",
]

Durability = Literal["sync", "exit"]
"""When steps reach the store: after each step (``sync``) or when the run stops (``exit``)."""


class Progress(Protocol):
    """What ``Persistence`` reads of a run to write it (the step loop's ``Run`` is one)."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def step(self) -> int:
        """The step last merged (the one a commit writes)."""
        ...

    @property
    def values(self) -> Mapping[str, Any]:
        """The channel values after that step."""
        ...

    def where(self, node: str | None = None) -> _RunAt:
        """Where the run is (at ``node``), as the keywords that locate a ``RunError``."""
        ...

    @property
    def tasks(self) -> Sequence[Task]:
        """The tasks scheduled for the next step."""
        ...

    @property
    def joins_seen(self) -> Mapping[int, frozenset[str]]:
        """Join barriers part-way filled."""
        ...

    @property
    def rules(self) -> RuleSet | None:
        """The run's rule engines, whose facts are saved with each step."""
        ...

    @property
    def decision(self) -> RuleDecision | None:
        """The rule decision of the step (not ``continue``)."""
        ...

    @property
    def attempts(self) -> Mapping[str, int]:
        """Attempts of the step's retried tasks, by ``node/index``."""
        ...

    @property
    def journals(self) -> Mapping[tuple[str, int], list[JournalEntry]]:
        """The recorded calls of the step's tasks."""
        ...


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _by_task(result: tuple[Task, Any]) -> tuple[str, int]:
    return result[0].key


def _by_call(entry: JournalEntry) -> tuple[str, int, int]:
    return entry.node, entry.index, entry.seq


def _by_seq(entry: JournalEntry) -> int:
    # The entries of one task: node and index are the same in every one.
    return entry.seq


def check_run_id(run_id: str) -> None:
    """Refuse a run id a store cannot hold (a lone surrogate) with a typed error."""
    problem = unicode_problem(run_id)
    if problem is not None:
        raise InvalidInputError(
            f"run id {run_id!r} cannot be stored: {problem}; run ids must be valid Unicode "
            "text (UTF-8), so pass a plain string such as 'run-42'",
            run_id=run_id,
        )


def check_values(
    channels: Mapping[str, Channel], values: Mapping[str, Any], *, run_id: str, what: str
) -> None:
    """Refuse values (an input, an update) that a store could not give back as they were."""
    for key, value in values.items():
        check = channels[key].check
        if check is not None and (found := check(value)) is not None:
            raise InvalidInputError(
                f"{what} of run {run_id!r} sets {key!r} to a value that a checkpoint store "
                f"cannot give back as it was: {key}{found[0]} is {found[1]}",
                run_id=run_id,
            )


def _acquiring(
    store: CheckpointStore, run_id: str, wait: bool | float
) -> Generator[float, None, tuple[Lease, RunRecord]]:
    """Try to lease ``run_id``; yields how long to sleep before the next try while another
    live owner holds it and ``wait`` allows waiting; returns the lease and the record."""
    owner = new_owner(DEFAULT_LEASE_S)
    deadline = None if wait is True else time.monotonic() + float(wait)
    delay = 0.01
    while True:
        try:
            record = store.acquire(run_id, owner)
            break
        except RunBusyError:
            if wait is False or (deadline is not None and time.monotonic() >= deadline):
                raise
            # Polling the store: the owner may be another process, on another host.
            yield delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic()))
            delay = min(delay * 2, 0.25)
    lease = Lease(store, run_id, owner)
    lease.hold()
    return lease, record


def take_lease(
    store: CheckpointStore, run_id: str, *, wait: bool | float = False
) -> tuple[Lease, RunRecord]:
    """Lease ``run_id`` to this process (heartbeats start at once); the run's record from
    just before. Raises ``RunBusyError`` while another live owner holds it, unless ``wait``
    (``True``, or at most that many seconds) lets it wait for the owner to let go."""
    tries = _acquiring(store, run_id, wait)
    try:
        while True:
            time.sleep(next(tries))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def atake_lease(
    store: CheckpointStore, run_id: str, *, wait: bool | float = False
) -> tuple[Lease, RunRecord]:
    """:func:`take_lease` for a coroutine: waiting for the owner sleeps on the event loop
    instead of blocking its thread."""
    tries = _acquiring(store, run_id, wait)
    try:
        while True:
            await asyncio.sleep(next(tries))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def task_records(graph: Plan, tasks: Sequence[Task]) -> tuple[TaskRecord, ...]:
    """Scheduled tasks as records (the graph's own for a list it schedules statically)."""
    key = tuple(tasks)
    try:
        found = graph.task_records.get(key)
    except TypeError:  # a payload that cannot be hashed (a dict): never the graph's own
        found = None
    if found is not None:
        return found
    return tuple(
        trusted_fields(
            TaskRecord,
            {"node": t.node, "index": t.index, "payload": dict(t.payload) if t.payload else None},
        )
        for t in key
    )


def joins_record(joins: Mapping[int, frozenset[str]]) -> dict[str, tuple[str, ...]]:
    """Join barriers as JSON (only those part-way filled)."""
    return {str(k): tuple(sorted(v)) for k, v in sorted(joins.items()) if v}


def graph_to_keep(graph: Plan, store: CheckpointStore) -> tuple[str, bytes] | None:
    """``(graph_hash, IR)`` for ``store`` to keep, or ``None`` when this process already gave
    it to that store (the IR is serialised once per graph and store, not once per run)."""
    if graph.holds_ir(store):
        return None
    return graph.graph_hash, graph.ir.to_json().encode()


def keep_graph(graph: Plan, store: CheckpointStore) -> None:
    """Give ``store`` the IR of ``graph`` (content-addressed by its hash) unless this process
    already did: every stored run can then be loaded by any process that can import the
    graph's code, with no ``--graph`` and no file beside the database."""
    kept = graph_to_keep(graph, store)
    if kept is not None:
        store.put_graph(*kept)
        graph.gave_ir(store)


_UNSTORABLE: Final = (pydantic_core.PydanticSerializationError, ValueError, TypeError)
"""What pydantic raises for a value it cannot serialize as JSON."""


def _unstorable(run: Progress, node: str | None, exc: Exception) -> InvalidWriteError:
    """The error for a value (written by ``node``, or in the state) that cannot be stored."""
    where = f"node {node!r}" if node else "the state"
    return InvalidWriteError(
        f"{where} at step {run.step} of run {run.run_id!r} holds a value that cannot "
        f"be stored as JSON ({exc}); write JSON data or values of the field's type",
        **run.where(node),
    )


class Persistence:
    """Writes one run's progress to a store (or, in ``exit`` mode, to a buffer first), under
    the run's lease when it holds one."""

    def __init__(
        self,
        graph: Plan,
        store: CheckpointStore,
        *,
        durability: Durability = "sync",
        snapshot_every: int = 50,
        lease: Lease | None = None,
    ) -> None:
        self.graph = graph
        self.target = store
        self.durability = durability
        self.store: CheckpointStore = MemoryStore() if durability == "exit" else store
        self.snapshot_every = snapshot_every
        self.lease: Lease | None = None
        self.owner: str | None = None
        # (thread id, turn) when the run is a turn of a thread (see runtime._threads).
        self.thread: tuple[str, int] | None = None
        self._hold(lease)
        # The last model request of each conversation, so the next one is stored as a delta.
        self._conversations: Conversations = {}
        # The tool calls of the steps committed so far, which those requests' tool messages
        # refer to instead of repeating their results.
        self._results: ToolResults = {}
        # The same, for the journal rows written as calls are made (in the order they are
        # made; a commit orders a step's calls by task).
        self._journaled: Conversations = {}
        # The deltas worked out for the journal rows, which the step's record stores again.
        self._deltas: Deltas = {}
        # Append-only channels, and the step whose snapshot holds each in full (None: not
        # known yet in this process; read from the store at the first snapshot).
        self._appends = graph.appendable
        self._roots: dict[str, int] | None = None
        # Whether the run's last commit marked it done already (see ``commit``).
        self._done = False
        # The rule facts last stored in full and the step holding them, which later steps
        # with the same (identical) facts refer to, in a store that resolves references.
        self._facts: tuple[dict[str, Any], int] | None = None
        self._features = features_of(self.store)

    def _hold(self, lease: Lease | None) -> None:
        """Adopt ``lease`` (``None``: none held). ``owner`` is its token, kept as a plain
        attribute because every commit reads it."""
        self.lease = lease
        self.owner = None if lease is None else lease.token

    def _dump(self, run: Progress, values: Mapping[str, Any], node: str | None) -> dict[str, Any]:
        """``jsonable``, with a value pydantic cannot serialize reported as a typed error."""
        try:
            return jsonable(self.graph.channels, values)
        except _UNSTORABLE as exc:
            raise _unstorable(run, node, exc) from exc

    def _write_to(self, target: CheckpointStore) -> None:
        """Write the run's later events straight to ``target`` (the buffer of ``exit`` mode
        was flushed into it)."""
        self.store = target
        self.durability = "sync"
        # The buffer's steps went in whole: the next facts are stored in full first.
        self._features = features_of(target)
        self._facts = None

    def _let_go(self) -> None:
        """The store released the lease (a status change): stop heartbeats."""
        if self.lease is not None:
            self.lease.drop()
            self._hold(None)

    def abandon(self) -> None:
        """Give the lease up at once without a status change: the run stopped here without
        a word to its store (a store error, ``KeyboardInterrupt``, a second signal). It
        stays ``running`` with this owner on record, shown as ``orphaned``, and the next
        resume takes it over at once."""
        if self.lease is not None:
            lease = self.lease
            self._hold(None)
            lease.abandon()

    def _guarded(self, write: Callable[[], None]) -> None:
        """Run a store write; if the store refuses it, let the lease go, since the run will
        not go on in this process (or the lease was lost already)."""
        try:
            write()
        except CheckpointError:
            self.abandon()
            raise

    def start(
        self, run: Progress, *, parent_run_id: str | None = None, parent_step: int | None = None
    ) -> None:
        """Create the run with its step 0 (the input and the entry tasks), leased to this
        process."""
        check_run_id(run.run_id)
        check_values(self.graph.channels, run.values, run_id=run.run_id, what="the input")
        # In exit mode the run reaches the store only when it stops: there is nothing to
        # lease meanwhile.
        owner = new_owner(DEFAULT_LEASE_S) if self.durability == "sync" else None
        # Both records built without validation (every run pays for this): each field is
        # given, of its declared type, from values this process made or checked above.
        record = trusted_fields(
            RunRecord,
            {
                "run_id": run.run_id,
                "graph_name": self.graph.ir.name,
                "graph_hash": self.graph.graph_hash,
                "code_hash": self.graph.code_hash,
                "status": "running",
                "last_step": 0,
                "parent_run_id": parent_run_id,
                "parent_step": parent_step,
                "created_at": iso_now(),
                "updated_at": "",
                "error": None,
                "stopped_by": None,
                "stop_reason": None,
                "interrupt": None,
                "owner": owner,
                "lease_expires": None,
                "thread_id": None if self.thread is None else self.thread[0],
                "turn": None if self.thread is None else self.thread[1],
            },
        )
        self._roots = dict.fromkeys(self._appends, run.step)
        first = trusted_fields(
            StepRecord,
            {
                "step": run.step,
                "writes": (),
                "snapshot": self._dump(run, run.values, None),
                "carried": {},
                "next": task_records(self.graph, run.tasks),
                "joins": joins_record(run.joins_seen) if run.joins_seen else {},
                "facts": None,
                "facts_from": None,
                "decision": None,
                "attempts": {},
                "calls": (),
                "created_ms": _now_ms(),
                "as_node": None,
            },
        )
        if self.durability == "sync":  # an exit-mode run gives its graph when it is written
            keep_graph(self.graph, self.target)
        self.store.create_run(record, first)
        if owner is not None:
            lease = Lease(self.store, run.run_id, owner)
            lease.hold()
            self._hold(lease)

    def journal_writer(self, run: Progress) -> Callable[[JournalEntry], None]:
        """A function that saves one journal entry of ``run``."""
        store, run_id, lease, journaled = self.store, run.run_id, self.lease, self._journaled
        deltas = self._deltas

        def write(entry: JournalEntry) -> None:
            if lease is not None and lease.lost:
                # Another process took the run over: record (and so perform) nothing more.
                raise LeaseLostError(
                    f"run {run_id!r}: this process's lease on the run was taken over; node "
                    f"{entry.node!r} stops before its next recorded call",
                    run_id=run_id,
                    step=entry.step,
                    node=entry.node,
                )
            # A model request goes in as a delta, like in the step's record: the row of every
            # call must not hold the whole conversation again (see load_journal).
            store.append_journal(run_id, compact_call(entry, journaled, deltas=deltas))

        return write

    def put_pending(self, run: Progress, task: Task, writes: dict[str, Any]) -> None:
        """Save a finished task's writes before its step commits."""
        pending = PendingWrite(
            step=run.step,
            node=task.node,
            index=task.index,
            writes=self._dump(run, writes, task.node),
        )
        self._guarded(lambda: self.store.put_pending(run.run_id, pending))

    def commit(
        self,
        run: Progress,
        results: Sequence[tuple[Task, dict[str, Any]]],
        *,
        last: bool = False,
        stopped_by: str | None = None,
        stop_reason: str | None = None,
        halted: bool = False,
        as_node: str | None = None,
    ) -> None:
        """Commit the step just merged: its writes, next tasks, joins (one transaction). The
        caller then clears the step's bookkeeping (``Run.committed``).

        ``last``: nothing follows the step, so the run finishes right after it (ended by the
        rule ``stopped_by`` for ``stop_reason``, if one did; ``halted``: that rule halted
        it). A store that can does it in the same transaction - the step, status ``done``
        (or ``halted``) and the lease released - and the :meth:`finish` that follows has
        nothing left to write. ``as_node``: the step is an update routed as that node.
        """
        snapshot: dict[str, Any] | None = None
        carried: dict[str, int] = {}
        if run.step % self.snapshot_every == 0:
            snapshot, carried = self._snapshot(run)
        facts, facts_from = (
            (None, None) if run.rules is None else self._facts_of(run, snapshot is None)
        )
        if len(results) == 1:  # the common step: no generator, no sort
            ((task, written),) = results
            try:  # self._dump, inline: every step of every run with a store pays this
                dumped = jsonable(self.graph.channels, written)
            except _UNSTORABLE as exc:
                raise _unstorable(run, task.node, exc) from exc
            writes: tuple[tuple[str, int, dict[str, Any]], ...] = ((task.node, task.index, dumped),)
        else:
            writes = tuple(
                (t.node, t.index, self._dump(run, w, t.node))
                for t, w in sorted(results, key=_by_task)
            )
        values = StepValues(
            run.step,
            writes,
            snapshot,
            carried,
            task_records(self.graph, run.tasks),
            # The common step (one task, no join, retry or recorded call) skips the empty
            # copies and sorts: this runs at every step of every run with a store.
            joins_record(run.joins_seen) if run.joins_seen else {},
            facts,
            facts_from,
            None if run.decision is None else run.decision.record(),
            dict(run.attempts) if run.attempts else {},
            self._calls(run.journals) if run.journals else (),
            time.time_ns() // 1_000_000,
            as_node,
        )
        # A store that takes the values builds the record only if the step is read.
        record: Any = values if "step_values" in self._features else values.record()
        store = self.store
        self._done = False
        try:
            if last and "releases_on_final_commit" in self._features:
                store.commit_step(
                    run.run_id,
                    record,
                    status="halted" if halted else "done",
                    stopped_by=stopped_by,
                    stop_reason=stop_reason,
                    owner=self.owner,
                )
                self._done = True
                self._let_go()  # the commit released the lease in the store
            else:
                store.commit_step(run.run_id, record, owner=self.owner)
        except CheckpointError:
            self.abandon()  # the run will not go on in this process
            raise
        if facts is not None and "refer_to_facts" in self._features:
            self._facts = (facts, run.step)  # committed: later steps may refer to it

    def _calls(
        self, journals: Mapping[tuple[str, int], list[JournalEntry]]
    ) -> tuple[JournalEntry, ...]:
        """The step's recorded calls as its record stores them: by task and sequence number,
        each model request as a delta."""
        if len(journals) == 1:
            (entries,) = journals.values()
            if len(entries) == 1:  # an agent's step: one call, nothing to sort
                calls: Sequence[JournalEntry] = entries
            else:
                calls = sorted(entries, key=_by_seq)
        else:
            calls = sorted((e for entries in journals.values() for e in entries), key=_by_call)
        return compact_calls(calls, self._conversations, self._results, self._deltas)

    def _facts_of(self, run: Progress, may_refer: bool) -> tuple[Any, int | None]:
        """The rule facts to store with the step being committed, as ``(facts,
        facts_from)``: the engines' snapshot, or - when it is the very object stored in
        full at an earlier step of this process, the store resolves references and
        ``may_refer`` (no state snapshot at this step, so loading a step never reads back
        past its snapshot) - ``None`` and that step."""
        if run.rules is None:
            return None, None
        facts = run.rules.snapshot()
        held = self._facts
        if may_refer and held is not None and held[0] is facts:
            return None, held[1]
        return facts, None

    def _snapshot(self, run: Progress) -> tuple[dict[str, Any], dict[str, int]]:
        """The snapshot of ``run`` after its current step: every channel but the append-only
        ones, which it refers back to (their items are stored once, in the steps' writes)."""
        if not self._appends:
            return self._dump(run, run.values, None), {}
        roots = self._roots
        if roots is None:
            roots = self._roots = self._stored_roots(run)
        carried = {name: roots[name] for name in self._appends if name in roots}
        values = {k: v for k, v in run.values.items() if k not in carried}
        return self._dump(run, values, None), carried

    def _stored_roots(self, run: Progress) -> dict[str, int]:
        """Where the append-only channels of a run this process did not start are held in
        full: read from its newest snapshot before the current step (one row)."""
        store, run_id = self.store, run.run_id
        try:
            at = store.snapshot_step(run_id, run.step - 1)
            (before,) = store.get_steps(run_id, start=at, end=at)
        except (LookupError, ValueError):
            return {}  # unknown history: this snapshot holds every channel in full
        held = before.snapshot or {}
        return {
            name: before.carried.get(name, at)
            for name in self._appends
            if name in before.carried or name in held
        }

    def _stop(self, run: Progress, status: Any, **fields: Any) -> None:
        owner = self.owner
        self._guarded(lambda: self.store.set_status(run.run_id, status, owner=owner, **fields))
        self._let_go()  # the status change released the lease in the store
        self.flush(run)

    def interrupted(self, run: Progress, interrupt: dict[str, Any]) -> None:
        """Mark the run interrupted, waiting on ``interrupt`` (and release its lease)."""
        self._stop(run, "interrupted", interrupt=interrupt)

    def finish(
        self,
        run: Progress,
        *,
        stopped_by: str | None = None,
        stop_reason: str | None = None,
        halted: bool = False,
    ) -> None:
        """Mark the run done - or halted, when the rule ``stopped_by`` halted it - (and
        release its lease), unless its last commit did."""
        if self._done:
            self.flush(run)
            return
        status = "halted" if halted else "done"
        self._stop(run, status, stopped_by=stopped_by, stop_reason=stop_reason)

    def fail(self, run: Progress, error: str) -> None:
        """Mark the run failed (it stays resumable: fix the cause, then resume). The store
        keeps the head and tail of a very long error."""
        self._stop(run, "failed", error=error)

    def cancel(self, run: Progress, reason: str) -> None:
        """Mark the run cancelled at its last committed step, saying what cancelled it
        (and release its lease)."""
        self._stop(run, "cancelled", stopped_by=reason)

    def flush(self, run: Progress) -> None:
        """In ``exit`` mode, copy the buffered run into the real store."""
        if self.durability != "exit":
            return
        buffer, target, run_id = self.store, self.target, run.run_id
        record = buffer.get_run(run_id)
        steps = buffer.get_steps(run_id)
        pending_step = record.last_step + 1
        if "write_run" in features_of(target):
            # One transaction for the whole run: what makes "exit" cheaper than "sync".
            target.write_run(  # type: ignore[attr-defined]
                record.model_copy(update={"owner": None, "lease_expires": None}),
                steps,
                pending=buffer.get_pending(run_id, pending_step),
                journal=buffer.get_journal(run_id, pending_step),
                graph=graph_to_keep(self.graph, target),
            )
            self.graph.gave_ir(target)
            self._write_to(target)
            return
        keep_graph(self.graph, target)
        target.create_run(record.model_copy(update={"status": "running"}), steps[0])
        for step in steps[1:]:
            target.commit_step(run_id, step)
        for write in buffer.get_pending(run_id, pending_step):
            target.put_pending(run_id, write)
        for entry in buffer.get_journal(run_id, pending_step):
            target.append_journal(run_id, entry)
        target.set_status(
            run_id,
            record.status,
            error=record.error,
            stopped_by=record.stopped_by,
            stop_reason=record.stop_reason,
            interrupt=record.interrupt,
        )
        # Later events of the same run (a resume in this process) go straight to the target.
        self._write_to(target)


def _corrupt(run_id: str, step: int, exc: Exception) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"checkpoint of run {run_id!r} at step {step} does not fit the state model: {exc}; "
        "the stored row is damaged or was written by another state schema",
        run_id=run_id,
        step=step,
    )


def decode_writes(
    channels: Mapping[str, Channel], run_id: str, step: int, writes: Mapping[str, Any]
) -> dict[str, Any]:
    """Validate stored JSON writes back into channel values (where a task's ``Command``
    went, under ``GOTO_KEY``, comes back as it was stored)."""
    try:
        return {key: channels[key].validate(value) for key, value in writes.items()}
    except KeyError as exc:
        if ROUTING_KEYS.isdisjoint(writes):
            raise _corrupt(run_id, step, exc) from exc
    except ValidationError as exc:
        raise _corrupt(run_id, step, exc) from exc
    rest = decode_writes(channels, run_id, step, _routing_dropped(writes))
    rest.update((key, writes[key]) for key in ROUTING_KEYS if key in writes)
    return rest


def _routing_dropped(writes: Mapping[str, Any]) -> dict[str, Any]:
    """``writes`` without where a ``Command`` went: only the channels' writes."""
    return {key: value for key, value in writes.items() if key not in ROUTING_KEYS}


def load_values(
    store: CheckpointStore, channels: Mapping[str, Channel], run_id: str, step: int
) -> tuple[dict[str, Any], StepRecord]:
    """Channel values after ``step`` of ``run_id``, and that step's record.

    Starts from the newest snapshot at or before ``step`` and merges the later steps' writes
    through the reducers, in the order they were merged when the run made them. A channel
    the snapshot carries (an append-only one) starts from the snapshot that holds it in full
    and takes the writes of every step since: each of its items is read once.
    """
    base = store.snapshot_step(run_id, step)
    steps = store.get_steps(run_id, start=base, end=step)
    if not steps or steps[-1].step != step or steps[0].snapshot is None:
        raise _lost(run_id, step)
    head = steps[0]
    values = decode_writes(channels, run_id, base, head.snapshot or {})
    roots = {name: at for name, at in head.carried.items() if name not in values}
    if any(at >= base for at in roots.values()):
        raise _corrupt(run_id, base, KeyError(sorted(roots)))
    if roots:
        # An older-format snapshot holds every channel; a newer one refers back for the
        # append-only channels: read from the oldest snapshot they need.
        earlier = store.get_steps(run_id, start=min(roots.values()), end=base - 1)
        if len(earlier) != base - min(roots.values()):
            raise _lost(run_id, base)
        for name, at in roots.items():
            origin = earlier[at - earlier[0].step]
            if origin.snapshot is None or name not in origin.snapshot:
                raise _corrupt(run_id, base, KeyError(name))
            values[name] = decode_writes(channels, run_id, at, {name: origin.snapshot[name]})[name]
        for record in [*earlier, head]:
            _merge(channels, run_id, record, values, only=roots, after=roots)
    missing = set(channels) - set(values)
    if missing:
        raise _corrupt(run_id, base, KeyError(sorted(missing)))
    for record in steps[1:]:
        _merge(channels, run_id, record, values)
    return values, steps[-1]


def _lost(run_id: str, step: int) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"run {run_id!r} has no complete history up to step {step}; the store lost rows",
        run_id=run_id,
        step=step,
    )


def _merge(
    channels: Mapping[str, Channel],
    run_id: str,
    record: StepRecord,
    values: dict[str, Any],
    *,
    only: Mapping[str, int] | None = None,
    after: Mapping[str, int] | None = None,
) -> None:
    """Merge ``record``'s writes into ``values`` (``only`` those channels, each only in the
    steps ``after`` its root)."""
    for write in record.writes:
        raw = write.writes
        if not ROUTING_KEYS.isdisjoint(raw):
            raw = _routing_dropped(raw)
        if only is not None and after is not None:
            raw = {k: v for k, v in raw.items() if k in only and record.step > after[k]}
            if not raw:
                continue
        # The loaded values are this function's own: lists are extended in place.
        reduce_writes(
            channels, values, decode_writes(channels, run_id, record.step, raw), owned=True
        )


def load_journal(store: CheckpointStore, run_id: str, step: int) -> list[JournalEntry]:
    """The journal of ``step`` (not yet committed) with its model requests whole: a row
    holding a delta is rebuilt from the earlier requests of its conversation (read once,
    from the committed steps, only when there is one)."""
    entries = store.get_journal(run_id, step)
    if not any(entry.base for entry in entries):
        return entries
    known: dict[str, Any] = {}
    expand_steps(store.get_steps(run_id, end=step - 1), known)
    (record,) = expand_steps([StepRecord(step=step, calls=tuple(entries))], known)
    return list(record.calls)


def tasks_from(records: Sequence[TaskRecord]) -> list[Task]:
    """Records back to tasks."""
    return [Task(r.node, r.index, r.payload) for r in records]


def joins_from(record: StepRecord) -> dict[int, frozenset[str]]:
    """Join barriers back from a step record."""
    return {int(k): frozenset(v) for k, v in record.joins.items()}
