"""Stored runs: resume, fork, history, time travel and nested child runs of a compiled graph.

``StoredRuns`` is a mixin of :class:`~stargraph.runtime.CompiledGraph`: everything that reads
a run back from the checkpoint store lives here, apart from the executor's step loop.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast, overload

from pydantic import BaseModel, ValidationError

from stargraph.checkpoint import (
    CheckpointStore,
    JournalEntry,
    RunRecord,
    StepRecord,
    WriteRecord,
)
from stargraph.checkpoint._compact import expand_steps
from stargraph.checkpoint._lease import Lease
from stargraph.errors import (
    CheckpointError,
    CodeHashMismatch,
    CodeHashWarning,
    GraphHashMismatch,
    InvalidInputError,
    RunNotResumableError,
)
from stargraph.runtime._context import Entropy
from stargraph.runtime._durable import (
    Persistence,
    atake_lease,
    check_run_id,
    check_values,
    decode_writes,
    joins_from,
    load_journal,
    load_values,
    take_lease,
    tasks_from,
)
from stargraph.runtime._events import Event
from stargraph.runtime._plan import NodeSpec, Task
from stargraph.runtime._rules import RuleSet
from stargraph.runtime._run import Run, jsonable
from stargraph.runtime._stream import StreamMode, stream_modes
from stargraph.state import Channel

if TYPE_CHECKING:
    from stargraph.runtime._executor import CompiledGraph

__all__ = ["NO_RESPONSE", "Migration", "StoredRuns"]

StateT = TypeVar("StateT", bound=BaseModel)

NO_RESPONSE: Any = object()
"""Sentinel: ``resume`` was called without ``response=``."""

Migration = Callable[[dict[str, Any]], Mapping[str, Any]]
"""Turns a run's state (JSON) recorded by an old graph into a state of the new graph."""


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()
    )


class StoredRuns(Generic[StateT]):
    """Durable-run operations of a compiled graph (see the module docstring)."""

    @property
    def _graph(self) -> CompiledGraph[Any]:
        # The mixin is only ever part of a CompiledGraph.
        return cast("CompiledGraph[Any]", self)

    if TYPE_CHECKING:
        # Provided by CompiledGraph; declared here for the type checker only.
        store: CheckpointStore | None
        channels: Mapping[str, Channel]
        state_model: type[StateT]
        specs: Mapping[str, NodeSpec]
        max_steps: int
        snapshot_every: int
        on_code_change: Literal["warn", "error"]
        rules: Callable[[], RuleSet] | None
        _entropy_factory: Callable[[], Entropy]

        @property
        def graph_hash(self) -> str: ...

        @property
        def code_hash(self) -> str: ...

        def _new_run(
            self,
            input: Mapping[str, Any] | BaseModel | None,
            run_id: str | None,
            max_steps: int | None,
            emit: Callable[[Event], None] | None,
        ) -> Run: ...

        def _run_to_end(self, run: Run, *, fresh: bool) -> None: ...

        def _live(
            self,
            make_run: Callable[[Callable[[Event], None]], Run],
            modes: tuple[str, ...],
            *,
            fresh: bool,
        ) -> Iterator[Any]: ...

        def _adrive(self, run: Run, *, fresh: bool) -> AsyncGenerator[int, None]: ...

        def _state(self, run: Run) -> StateT: ...
        def _result(self, run: Run) -> StateT: ...

        def _observed(
            self, emit: Callable[[Event], None] | None
        ) -> Callable[[Event], None] | None: ...

    def resume(
        self,
        run_id: str,
        *,
        response: Any = NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        migration: Migration | None = None,
        wait: bool | float = False,
    ) -> StateT:
        """Continue a stored run after its last committed step; return the state reached.

        Completed steps and finished siblings of the interrupted step are not re-run.
        ``response`` answers a ``ctx.interrupt()``; ``update`` writes channels before the run
        continues (recorded as a step of its own, so history stays append-only).

        The resume takes the run's lease before any node runs: while another live process
        (or thread) runs the run, this raises :class:`RunBusyError` naming it, or with
        ``wait=True`` (or a number of seconds) waits for it to let go. A run whose owner is
        gone (``orphaned``) resumes at once. Answering an interrupt again before the run
        went on (say the first resume crashed) replaces the earlier answer.

        A run recorded by another graph raises :class:`GraphHashMismatch` unless
        ``migration`` is given: it receives the run's state as JSON and returns the state
        to continue from under this graph; the migration is committed as a step and the run
        is re-labelled with this graph's hash.
        """
        run = self._load(
            run_id,
            response=response,
            update=update,
            max_steps=max_steps,
            emit=None,
            migration=migration,
            wait=wait,
        )
        self._run_to_end(run, fresh=False)
        return self._result(run)

    @overload
    def resume_stream(
        self,
        run_id: str,
        *,
        response: Any = NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        migration: Migration | None = None,
        wait: bool | float = False,
        mode: Literal["events"] = "events",
    ) -> Iterator[Event]: ...

    @overload
    def resume_stream(
        self,
        run_id: str,
        *,
        response: Any = NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        migration: Migration | None = None,
        wait: bool | float = False,
        mode: StreamMode | Sequence[StreamMode],
    ) -> Iterator[Any]: ...

    def resume_stream(
        self,
        run_id: str,
        *,
        response: Any = NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        migration: Migration | None = None,
        wait: bool | float = False,
        mode: StreamMode | Sequence[StreamMode] = "events",
    ) -> Iterator[Any]:
        """:meth:`resume`, yielding what happens as it happens, in the stream ``mode`` of
        ``stream`` (typed events by default; ``"messages"`` for model tokens)."""
        modes = stream_modes(mode)
        yield from self._live(
            lambda emit: self._load(
                run_id,
                response=response,
                update=update,
                max_steps=max_steps,
                emit=emit,
                migration=migration,
                wait=wait,
            ),
            modes,
            fresh=False,
        )

    async def aresume(
        self,
        run_id: str,
        *,
        response: Any = NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        migration: Migration | None = None,
        wait: bool | float = False,
    ) -> StateT:
        """Async :meth:`resume`; with ``wait``, waiting for another owner to let go sleeps on
        the event loop (other tasks run meanwhile)."""
        store = self._require_store()
        check_run_id(run_id)
        taken = await atake_lease(store, run_id, wait=wait)
        run = self._load(
            run_id,
            response=response,
            update=update,
            max_steps=max_steps,
            emit=None,
            migration=migration,
            taken=taken,
        )
        async for _ in self._adrive(run, fresh=False):
            pass
        return self._result(run)

    def get_run(self, run_id: str) -> RunRecord:
        """The stored record of a run (status, last step, interrupt, error)."""
        return self._require_store().get_run(run_id)

    def list_runs(self, *, status: Any = None, limit: int = 100) -> list[RunRecord]:
        """Stored runs, newest first."""
        return self._require_store().list_runs(status=status, limit=limit)

    def history(self, run_id: str) -> list[StepRecord]:
        """Every committed step of a run, in order (step 0 is the input), with its recorded
        model requests whole."""
        return expand_steps(self._require_store().get_steps(run_id), {})

    def get_state(self, run_id: str, step: int | None = None) -> StateT:
        """The state of a stored run after ``step`` (default: its last committed step)."""
        store = self._require_store()
        last = store.get_run(run_id).last_step
        if step is not None and not 0 <= step <= last:
            raise CheckpointError(
                f"run {run_id!r} has steps 0..{last}; step {step} does not exist",
                run_id=run_id,
                step=step,
            )
        values, _ = load_values(store, self.channels, run_id, last if step is None else step)
        return self.state_model.model_validate(values)

    def fork(
        self,
        run_id: str,
        step: int,
        *,
        update: Mapping[str, Any] | None = None,
        new_run_id: str | None = None,
    ) -> str:
        """Start a new run from ``step`` of ``run_id`` (optionally with changed channels).

        The fork holds a copy of the parent's steps ``0..step`` (same step ids, same recorded
        calls, so it replays like the parent up to there); ``update`` becomes step
        ``step + 1``, written by ``__update__``. It is linked to its parent
        (``parent_run_id``/``parent_step``); continue it with ``resume(new_run_id)``.
        Returns the new run id.
        """
        store = self._require_store()
        record = self._check_hashes(store.get_run(run_id))
        if not 0 <= step <= record.last_step:
            raise CheckpointError(
                f"run {run_id!r} has steps 0..{record.last_step}; cannot fork from step {step}",
                run_id=run_id,
                step=step,
            )
        new_id = new_run_id or f"{run_id}~{uuid.uuid4().hex[:8]}"
        writes = self._validate_update(update, new_id) if update else None
        history = store.get_steps(run_id, start=0, end=step)
        store.create_run(
            record.model_copy(
                update={
                    "run_id": new_id,
                    "status": "running",
                    "last_step": 0,
                    "parent_run_id": run_id,
                    "parent_step": step,
                    "error": None,
                    "stopped_by": None,
                    "interrupt": None,
                    "owner": None,  # the parent's lease, if any, is not the fork's
                    # A fork of a thread's turn is a branch beside the thread, not a turn.
                    "thread_id": None,
                    "turn": None,
                    "lease_expires": None,
                    "created_at": "",
                    "updated_at": "",
                }
            ),
            history[0],
        )
        for past in history[1:]:
            store.commit_step(new_id, past)
        if writes:
            values, at = load_values(store, self.channels, new_id, step)
            run = Run(
                self._graph,
                new_id,
                values,
                max_steps=self.max_steps,
                entropy=self._entropy_factory(),
                emit=None,
            )
            run.step = step
            run.tasks = tasks_from(at.next)
            run.joins_seen = joins_from(at)
            run.persistence = Persistence(self._graph, store, snapshot_every=self.snapshot_every)
            self._apply_update(run, update or {})
        return new_id

    def run_nested(
        self,
        input: Mapping[str, Any],
        *,
        run_id: str,
        path: tuple[str, ...],
        emit: Callable[[Event], None] | None,
        parent: Any,
    ) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        """Run this graph as the child of a subgraph node; return its final values and the raw
        writes of all its steps (for projection into the parent).

        With a store the child is durable under ``run_id``: an existing child run is resumed
        (or, when done, read back) instead of started again. An interrupt inside the child
        parks the parent through ``parent.interrupt`` (the parent's run context); the answer
        given to the parent is handed down when the child resumes.
        """
        raw: list[tuple[str, dict[str, Any]]] = []
        record = None
        if self.store is not None:
            try:
                record = self.store.get_run(run_id)
            except LookupError:
                record = None
        # The parent's live stream (if any) gets the child's custom events and model tokens
        # as they happen; the child's typed events go to ``emit``, in task order.
        feed = getattr(parent, "_feed", None)
        if record is None:
            run = self._new_run(input, run_id, None, emit)
            run.path, run.collect, run.feed = path, raw, feed
            self._run_to_end(run, fresh=True)
        else:
            store = self._require_store()
            raw.extend(self._history_writes(run_id, record.last_step))
            if record.status == "done":
                values, _ = load_values(store, self.channels, run_id, record.last_step)
                return values, raw
            response = NO_RESPONSE
            if record.status == "interrupted":
                answer = parent.interrupt(record.interrupt)
                if isinstance(record.interrupt, dict) and record.interrupt.get("kind") == "node":
                    response = answer
            run = self._load(run_id, response=response, update=None, max_steps=None, emit=emit)
            run.path, run.collect, run.feed = path, raw, feed
            self._run_to_end(run, fresh=False)
        if self.store is not None:
            after = self.store.get_run(run_id)
            if after.status == "interrupted":
                parent.interrupt(after.interrupt)
        return run.values, raw

    def _history_writes(self, run_id: str, last: int) -> list[tuple[str, dict[str, Any]]]:
        store = self._require_store()
        out: list[tuple[str, dict[str, Any]]] = []
        for step in store.get_steps(run_id, start=1, end=last):
            for write in step.writes:
                out.append(
                    (write.node, decode_writes(self.channels, run_id, step.step, write.writes))
                )
        return out

    def _require_store(self) -> CheckpointStore:
        if self.store is None:
            raise CheckpointError(
                "this graph was compiled without a checkpoint store; compile it with "
                "store=SqliteStore('.stargraph/stargraph.db') (or MemoryStore()) to keep runs"
            )
        return self.store

    def _validate_update(self, update: Mapping[str, Any], run_id: str) -> dict[str, Any]:
        check_run_id(run_id)
        out: dict[str, Any] = {}
        for key, value in update.items():
            channel = self.channels.get(key)
            if channel is None:
                raise InvalidInputError(
                    f"update of run {run_id!r} names {key!r}, which is not a field of "
                    f"{self.state_model.__name__} (fields: {sorted(self.channels)})",
                    run_id=run_id,
                )
            try:
                out[key] = channel.validate(value)
            except ValidationError as exc:
                raise InvalidInputError(
                    f"update of run {run_id!r}: {key}: {_describe(exc)}", run_id=run_id
                ) from exc
        check_values(self.channels, out, run_id=run_id, what="the update")
        return out

    def _check_hashes(self, record: RunRecord) -> RunRecord:
        if record.graph_hash != self.graph_hash:
            raise GraphHashMismatch(
                run_id=record.run_id, stored=record.graph_hash, current=self.graph_hash
            )
        if record.code_hash != self.code_hash:
            message = (
                f"run {record.run_id!r} was checkpointed by different node code "
                f"({record.code_hash} -> {self.code_hash}); nodes will run the new code"
            )
            if self.on_code_change == "error":
                raise CodeHashMismatch(
                    message + "; compile with on_code_change='warn' to allow it",
                    run_id=record.run_id,
                )
            warnings.warn(message, CodeHashWarning, stacklevel=4)
        return record

    def _load(
        self,
        run_id: str,
        *,
        response: Any,
        update: Mapping[str, Any] | None,
        max_steps: int | None,
        emit: Callable[[Event], None] | None,
        migration: Migration | None = None,
        wait: bool | float = False,
        taken: tuple[Lease, RunRecord] | None = None,
    ) -> Run:
        store = self._require_store()
        check_run_id(run_id)
        # The lease first: nothing below (the interrupt's answer, the status, a node) may
        # be written by a second resumer while another process runs the run. ``taken``: the
        # caller took it already (aresume, waiting on its event loop).
        lease, record = take_lease(store, run_id, wait=wait) if taken is None else taken
        try:
            return self._load_leased(
                record,
                lease,
                response=response,
                update=update,
                max_steps=max_steps,
                emit=emit,
                migration=migration,
            )
        except BaseException:
            lease.release()
            raise

    def _load_leased(
        self,
        record: RunRecord,
        lease: Lease,
        *,
        response: Any,
        update: Mapping[str, Any] | None,
        max_steps: int | None,
        emit: Callable[[Event], None] | None,
        migration: Migration | None,
    ) -> Run:
        store = self._require_store()
        run_id = record.run_id
        if migration is not None and record.graph_hash != self.graph_hash:
            self._migrate(record, migration, owner=lease.token)
            record = store.get_run(run_id)
        record = self._check_hashes(record)
        waiting: Any = record.interrupt if record.status == "interrupted" else None
        if record.status == "done":
            raise RunNotResumableError(
                f"run {run_id!r} finished at step {record.last_step}; there is nothing to "
                f"resume (use fork({run_id!r}, step) to continue from an earlier step)",
                run_id=run_id,
                step=record.last_step,
            )
        on_node = isinstance(waiting, dict) and waiting.get("kind") == "node"
        if on_node and response is NO_RESPONSE:
            raise RunNotResumableError(
                f"run {run_id!r} is waiting for a response to the interrupt of node "
                f"{waiting['node']!r} at step {waiting['step']} (payload "
                f"{waiting.get('payload')!r}); pass resume(..., response=...)",
                run_id=run_id,
                step=record.last_step,
                node=waiting["node"],
            )
        if not on_node and response is not NO_RESPONSE:
            raise RunNotResumableError(
                f"run {run_id!r} is not waiting for a response (status {record.status!r}); "
                "call resume() without response=",
                run_id=run_id,
                step=record.last_step,
            )
        values, last = load_values(store, self.channels, run_id, record.last_step)
        run = Run(
            self._graph,
            run_id,
            values,
            max_steps=max_steps if max_steps is not None else self.max_steps,
            entropy=self._entropy_factory(),
            emit=self._observed(emit),
        )
        run.step = last.step
        run.tasks = tasks_from(last.next)
        run.joins_seen = joins_from(last)
        if self.rules is not None:
            run.rules = self.rules()
            run.rules.restore(last.facts)
        run.persistence = Persistence(
            self._graph, store, snapshot_every=self.snapshot_every, lease=lease
        )
        nxt = last.step + 1
        pending = store.get_pending(run_id, nxt)
        run.done = {
            (p.node, p.index): decode_writes(self.channels, run_id, nxt, p.writes) for p in pending
        }
        if on_node:
            answer = JournalEntry(
                step=nxt,
                node=waiting["node"],
                index=waiting["index"],
                seq=waiting["seq"],
                kind="interrupt",
                value={"response": response},
            )
            # Replace, not insert-or-ignore: the run is still interrupted, so no node has
            # read an answer at this position (a resume that journaled one and crashed
            # before the status changed left it unread), and this answer is the operator's
            # latest word.
            store.append_journal(run_id, answer, replace=True)
        for entry in load_journal(store, run_id, nxt):
            run.journals.setdefault((entry.node, entry.index), []).append(entry)
        if isinstance(waiting, dict) and waiting.get("kind") == "before":
            run.skip_interrupt_before = True
        if update:
            if on_node:
                raise RunNotResumableError(
                    f"run {run_id!r} is waiting inside node {waiting['node']!r}; answer it with "
                    "response= alone (an update would commit a step and drop what the node "
                    "recorded before it asked), then update at the next interrupt",
                    run_id=run_id,
                    step=record.last_step,
                    node=waiting["node"],
                )
            if pending:
                raise RunNotResumableError(
                    f"run {run_id!r} has a partly finished step {nxt}; resume it without "
                    f"update=, or fork it from step {last.step} with the update",
                    run_id=run_id,
                    step=nxt,
                )
            self._apply_update(run, update)
        store.set_status(run_id, "running", owner=lease.token)
        return run

    def _migrate(self, record: RunRecord, migration: Migration, *, owner: str | None) -> None:
        """Commit ``migration(state)`` as a step of the run, then adopt this graph's hash."""
        store = self._require_store()
        run_id = record.run_id
        last = store.get_steps(run_id, start=record.last_step, end=record.last_step)[-1]
        if store.get_pending(run_id, record.last_step + 1):
            raise RunNotResumableError(
                f"run {run_id!r} has a partly finished step {record.last_step + 1}; finish it "
                "with the graph that made it before migrating",
                run_id=run_id,
                step=record.last_step + 1,
            )
        # The stored steps are read through this graph's channels: a migration is for graphs
        # whose state still reads the old data (new nodes, changed edges or prompts). A state
        # that no longer reads it is reported as such; fork with the old graph instead.
        values, _ = load_values(store, self.channels, run_id, record.last_step)
        migrated = migration(jsonable(self.channels, values))
        state = self.state_model.model_validate(migrated)
        unknown = sorted({t.node for t in last.next} - set(self.specs))
        if unknown:
            raise RunNotResumableError(
                f"run {run_id!r} has scheduled nodes {unknown} that this graph lacks; the "
                "migration cannot continue it",
                run_id=run_id,
                step=record.last_step,
            )
        store.commit_step(
            run_id,
            StepRecord(
                step=record.last_step + 1,
                writes=(WriteRecord(node="__migration__", writes={}),),
                snapshot=jsonable(self.channels, dict(state.__dict__)),
                next=last.next,
                joins=last.joins,
                created_ms=last.created_ms,
            ),
            status="running" if record.status == "orphaned" else record.status,
            error=record.error,
            interrupt=record.interrupt,
            owner=owner,
        )
        store.set_graph(run_id, graph_hash=self.graph_hash, code_hash=self.code_hash)

    def _apply_update(self, run: Run, update: Mapping[str, Any]) -> None:
        writes = self._validate_update(update, run.run_id)
        run.step += 1
        run.merge([(Task("__update__"), writes)])
        assert run.persistence is not None
        run.persistence.commit(run, [(Task("__update__"), writes)])
