"""``CompiledGraph``: run, stream, resume, fork and inspect runs of a compiled graph.

A run is a sequence of *steps*. In each step every scheduled task (node execution) runs -
concurrently where that helps (async nodes on asyncio, ``blocking`` sync nodes on threads),
otherwise inline in a fixed order - and then, only when all have finished, their writes merge
in ``(node, index)`` order through the channels' reducers. Successors are scheduled from the
merged state, and (with a store) the step is committed before the next one starts. Nothing
about the result depends on which task finished first.
"""

from __future__ import annotations

import concurrent.futures
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from stargraph.checkpoint import (
    CheckpointStore,
    JournalEntry,
    Recording,
    RunRecord,
    StepRecord,
    WriteRecord,
)
from stargraph.errors import (
    CheckpointError,
    CodeHashMismatch,
    CodeHashWarning,
    GraphHashMismatch,
    InvalidInputError,
    ReplayError,
    RunNotResumableError,
    StargraphError,
)
from stargraph.ir import END, GraphIR
from stargraph.runtime._context import Entropy, SystemEntropy
from stargraph.runtime._durable import (
    Durability,
    Persistence,
    code_hash,
    joins_from,
    load_values,
    tasks_from,
)
from stargraph.runtime._events import (
    Event,
    NodeFinished,
    NodeStarted,
    RuleDecided,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunStarted,
    StepCompleted,
)
from stargraph.runtime._plan import NodeSpec, RouterSpec, Task
from stargraph.runtime._remote import Remote
from stargraph.runtime._replay import ReplayDriver
from stargraph.runtime._rules import RuleSet
from stargraph.runtime._run import Run, jsonable
from stargraph.runtime._tasks import StepOutcome, execute_async, execute_sync
from stargraph.state import Channel

__all__ = ["DEFAULT_MAX_STEPS", "CompiledGraph"]

StateT = TypeVar("StateT", bound=BaseModel)

DEFAULT_MAX_STEPS = 10_000
"""Supersteps a run may take before :class:`StepLimitExceeded` (override per compile/run)."""

_NO_RESPONSE: Any = object()

Migration = Callable[[dict[str, Any]], Mapping[str, Any]]
"""Turns a run's state (JSON) recorded by an old graph into a state of the new graph."""


class CompiledGraph(Generic[StateT]):
    """A validated graph, ready to run. Build it with ``Graph.compile()``.

    ``invoke`` / ``ainvoke`` return the final state; ``stream`` / ``astream`` yield typed
    events. With a ``store``, every step is checkpointed and ``resume``, ``fork``,
    ``history`` and ``get_state`` work on stored runs. ``graph_hash`` identifies exactly the
    behaviour being run.
    """

    def __init__(
        self,
        *,
        ir: GraphIR,
        state_model: type[StateT],
        channels: Mapping[str, Channel],
        specs: Mapping[str, NodeSpec],
        start_routers: Sequence[RouterSpec],
        max_steps: int = DEFAULT_MAX_STEPS,
        entropy: Callable[[], Entropy] = SystemEntropy,
        store: CheckpointStore | None = None,
        durability: Durability = "sync",
        snapshot_every: int = 50,
        on_code_change: Literal["warn", "error"] = "warn",
        rules: Callable[[], RuleSet] | None = None,
        services: Mapping[str, Any] | None = None,
        on_event: Callable[[Event], None] | None = None,
        executor: concurrent.futures.Executor | None = None,
    ) -> None:
        self.ir = ir
        # compile(executor=...): where blocking branch work runs (see runtime._remote). The
        # graph does not own it: close() leaves it running.
        self.executor = executor
        self.remote = None if executor is None else Remote(executor, specs, ir.state.ref)
        # Sees every event of every run (the plugin hook on_event); building events has a
        # cost, so only graphs with an observer pay it on invoke().
        self.on_event = on_event
        self.services: Mapping[str, Any] = dict(services or {})
        # Services that can route their calls through a task journal (chat models, arbiters).
        self.bindable = tuple(
            sorted(
                k for k, v in self.services.items() if callable(getattr(v, "bind_journal", None))
            )
        )
        self.rules = rules
        self.state_model = state_model
        self.channels = channels
        self.specs = specs
        self.start_routers = tuple(start_routers)
        self.max_steps = max_steps
        self.store = store
        self.durability: Durability = durability
        self.snapshot_every = snapshot_every
        self.on_code_change = on_code_change
        self._entropy_factory = entropy
        self.static_tasks: dict[str, tuple[Task, ...]] = {
            node: tuple(Task(n) for n in spec.static_next if n != END)
            for node, spec in specs.items()
        }
        # One-task tuples per target, for routers that pick a single node.
        self.single_tasks: dict[str, tuple[Task, ...]] = {node: (Task(node),) for node in specs}
        self.single_tasks[END] = ()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._interrupts = any(s.interrupt_before or s.interrupt_after for s in specs.values())

    @property
    def graph_hash(self) -> str:
        """``"sha256:<hex>"`` of the behavioural content of the graph."""
        return self.ir.graph_hash

    @cached_property
    def code_hash(self) -> str:
        """``"sha256:<hex>"`` of the source of every node and router (stored with runs)."""
        fns: list[Callable[..., Any]] = [spec.fn for spec in self.specs.values()]
        fns += [r.fn for spec in self.specs.values() for r in spec.routers]
        fns += [r.fn for r in self.start_routers]
        return code_hash(fns)

    # ------------------------------------------------------------------ running

    def invoke(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
    ) -> StateT:
        """Run to the end (or to an interrupt) and return the state reached."""
        run = self._new_run(input, run_id, max_steps, emit=None)
        self._run_to_end(run, fresh=True)
        return self._state(run)

    def stream(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
    ) -> Iterator[Event]:
        """Run to the end, yielding events as each step completes."""
        buffer: list[Event] = []
        run = self._new_run(input, run_id, max_steps, emit=buffer.append)
        yield from self._stream(run, buffer, fresh=True)

    async def ainvoke(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
    ) -> StateT:
        """Async :meth:`invoke`: async nodes of one step run concurrently on this loop."""
        run = self._new_run(input, run_id, max_steps, emit=None)
        async for _ in self._adrive(run, fresh=True):
            pass
        return self._state(run)

    async def astream(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
    ) -> AsyncIterator[Event]:
        """Async :meth:`stream`."""
        buffer: list[Event] = []
        run = self._new_run(input, run_id, max_steps, emit=buffer.append)
        try:
            async for _ in self._adrive(run, fresh=True):
                for event in buffer:
                    yield event
                buffer.clear()
        except StargraphError:
            for event in buffer:
                yield event
            raise
        for event in buffer:
            yield event

    # ------------------------------------------------------------------ durable runs

    def resume(
        self,
        run_id: str,
        *,
        response: Any = _NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        migration: Migration | None = None,
    ) -> StateT:
        """Continue a stored run after its last committed step; return the state reached.

        Completed steps and finished siblings of the interrupted step are not re-run.
        ``response`` answers a ``ctx.interrupt()``; ``update`` writes channels before the run
        continues (recorded as a step of its own, so history stays append-only).

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
        )
        self._run_to_end(run, fresh=False)
        return self._state(run)

    def resume_stream(
        self,
        run_id: str,
        *,
        response: Any = _NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
    ) -> Iterator[Event]:
        """:meth:`resume`, yielding events."""
        buffer: list[Event] = []
        run = self._load(
            run_id, response=response, update=update, max_steps=max_steps, emit=buffer.append
        )
        yield from self._stream(run, buffer, fresh=False)

    async def aresume(
        self,
        run_id: str,
        *,
        response: Any = _NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
    ) -> StateT:
        """Async :meth:`resume`."""
        run = self._load(run_id, response=response, update=update, max_steps=max_steps, emit=None)
        async for _ in self._adrive(run, fresh=False):
            pass
        return self._state(run)

    def replay(
        self,
        source: str | Recording,
        *,
        until_step: int | None = None,
        from_step: int | None = None,
        mutate: Mapping[str, Any] | None = None,
        new_run_id: str | None = None,
    ) -> StateT:
        """Replay a recorded run (a run id in this graph's store, or a :class:`Recording`
        such as a loaded cassette) offline and return its final state.

        Nothing is written and no model or tool is called; see ``runtime._replay``.
        ``until_step`` stops early. With ``from_step=k`` this is a *counterfactual*: steps
        before ``k`` come from the record, ``mutate`` (state overrides) is applied, and the
        run continues live from ``k`` as a new run linked to its parent (``new_run_id``).
        """
        if from_step is not None:
            if not isinstance(source, str):
                raise ReplayError("a counterfactual needs a run id in this graph's store")
            fork_id = self.fork(source, from_step - 1, update=mutate, new_run_id=new_run_id)
            return self.resume(fork_id)
        driver = ReplayDriver(self, self._recording(source), until_step=until_step)
        for _ in driver.steps_run():
            pass
        return self._state(driver.run)

    def replay_stream(
        self, source: str | Recording, *, until_step: int | None = None
    ) -> Iterator[Event]:
        """:meth:`replay`, yielding the replayed run's events (identical to the live ones)."""
        buffer: list[Event] = []
        driver = ReplayDriver(
            self, self._recording(source), until_step=until_step, emit=buffer.append
        )
        try:
            for _ in driver.steps_run():
                yield from buffer
                buffer.clear()
        except StargraphError:
            yield from buffer
            raise
        yield from buffer

    def _recording(self, source: str | Recording) -> Recording:
        if isinstance(source, Recording):
            return source
        return Recording.from_store(self._require_store(), source)

    def get_run(self, run_id: str) -> RunRecord:
        """The stored record of a run (status, last step, interrupt, error)."""
        return self._require_store().get_run(run_id)

    def list_runs(self, *, status: Any = None, limit: int = 100) -> list[RunRecord]:
        """Stored runs, newest first."""
        return self._require_store().list_runs(status=status, limit=limit)

    def history(self, run_id: str) -> list[StepRecord]:
        """Every committed step of a run, in order (step 0 is the input)."""
        return self._require_store().get_steps(run_id)

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
                self, new_id, values, max_steps=self.max_steps, entropy=SystemEntropy(), emit=None
            )
            run.step = step
            run.tasks = tasks_from(at.next)
            run.joins_seen = joins_from(at)
            run.persistence = Persistence(self, store, snapshot_every=self.snapshot_every)
            self._apply_update(run, update or {})
        return new_id

    # ------------------------------------------------------------------ internals

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
        if record is None:
            run = self._new_run(input, run_id, None, emit)
            run.path, run.collect = path, raw
            self._run_to_end(run, fresh=True)
        else:
            store = self._require_store()
            raw.extend(self._history_writes(run_id, record.last_step))
            if record.status == "done":
                values, _ = load_values(store, self.channels, run_id, record.last_step)
                return values, raw
            response = _NO_RESPONSE
            if record.status == "interrupted":
                answer = parent.interrupt(record.interrupt)
                if isinstance(record.interrupt, dict) and record.interrupt.get("kind") == "node":
                    response = answer
            run = self._load(run_id, response=response, update=None, max_steps=None, emit=emit)
            run.path, run.collect = path, raw
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
                out.append((write.node, _decode(self, run_id, step.step, write.writes)))
        return out

    def _require_store(self) -> CheckpointStore:
        if self.store is None:
            raise CheckpointError(
                "this graph was compiled without a checkpoint store; compile it with "
                "store=SqliteStore('.stargraph/stargraph.db') (or MemoryStore()) to keep runs"
            )
        return self.store

    def _new_run(
        self,
        input: Mapping[str, Any] | BaseModel | None,
        run_id: str | None,
        max_steps: int | None,
        emit: Callable[[Event], None] | None,
    ) -> Run:
        run_id = run_id or f"run-{os.urandom(8).hex()}"
        values = self._initial_values(input, run_id)
        run = Run(
            self,
            run_id,
            values,
            max_steps=max_steps if max_steps is not None else self.max_steps,
            entropy=self._entropy_factory(),
            emit=self._observed(emit),
        )
        if self.store is not None:
            run.persistence = Persistence(
                self, self.store, durability=self.durability, snapshot_every=self.snapshot_every
            )
        return run

    def _observed(self, emit: Callable[[Event], None] | None) -> Callable[[Event], None] | None:
        """``emit`` plus the ``on_event`` observer (plugins), when there is one."""
        observer = self.on_event
        if observer is None:
            return emit
        if emit is None:
            return observer

        def both(event: Event) -> None:
            emit(event)
            observer(event)

        return both

    def _initial_values(self, input: Mapping[str, Any] | BaseModel | None, run_id: str) -> Any:
        data: Any = {} if input is None else input
        if isinstance(data, BaseModel):
            data = data.model_dump()
        try:
            state = self.state_model.model_validate(data)
        except ValidationError as exc:
            raise InvalidInputError(
                f"input of run {run_id!r} does not fit {self.state_model.__name__}: "
                f"{_describe(exc)}",
                run_id=run_id,
                step=0,
            ) from exc
        return dict(state.__dict__)

    def _validate_update(self, update: Mapping[str, Any], run_id: str) -> dict[str, Any]:
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
    ) -> Run:
        store = self._require_store()
        record = store.get_run(run_id)
        if migration is not None and record.graph_hash != self.graph_hash:
            self._migrate(record, migration)
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
        if on_node and response is _NO_RESPONSE:
            raise RunNotResumableError(
                f"run {run_id!r} is waiting for a response to the interrupt of node "
                f"{waiting['node']!r} at step {waiting['step']} (payload "
                f"{waiting.get('payload')!r}); pass resume(..., response=...)",
                run_id=run_id,
                step=record.last_step,
                node=waiting["node"],
            )
        if not on_node and response is not _NO_RESPONSE:
            raise RunNotResumableError(
                f"run {run_id!r} is not waiting for a response (status {record.status!r}); "
                "call resume() without response=",
                run_id=run_id,
                step=record.last_step,
            )
        values, last = load_values(store, self.channels, run_id, record.last_step)
        run = Run(
            self,
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
        run.persistence = Persistence(self, store, snapshot_every=self.snapshot_every)
        nxt = last.step + 1
        pending = store.get_pending(run_id, nxt)
        run.done = {(p.node, p.index): _decode(self, run_id, nxt, p.writes) for p in pending}
        for entry in store.get_journal(run_id, nxt):
            run.journals.setdefault((entry.node, entry.index), []).append(entry)
        if on_node:
            key = (waiting["node"], waiting["index"])
            answer = JournalEntry(
                step=nxt,
                node=waiting["node"],
                index=waiting["index"],
                seq=waiting["seq"],
                kind="interrupt",
                value={"response": response},
            )
            store.append_journal(run_id, answer)
            run.journals.setdefault(key, []).append(answer)
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
                    "update=, or fork it from step {last.step} with the update",
                    run_id=run_id,
                    step=nxt,
                )
            self._apply_update(run, update)
        store.set_status(run_id, "running")
        return run

    def _migrate(self, record: RunRecord, migration: Migration) -> None:
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
            status=record.status,
            error=record.error,
            interrupt=record.interrupt,
        )
        store.set_graph(run_id, graph_hash=self.graph_hash, code_hash=self.code_hash)

    def _apply_update(self, run: Run, update: Mapping[str, Any]) -> None:
        writes = self._validate_update(update, run.run_id)
        run.step += 1
        run.merge([(Task("__update__"), writes)])
        assert run.persistence is not None
        run.persistence.commit(run, [(Task("__update__"), writes)])

    def _state(self, run: Run) -> StateT:
        return self.state_model.model_validate(run.values)

    def _emit(self, run: Run, event: Event) -> None:
        if run.emit is not None:
            run.emit(event)

    def _begin(self, run: Run, fresh: bool) -> None:
        if run.emit is not None:
            run.emit(
                RunStarted(
                    run_id=run.run_id,
                    step=run.step,
                    path=run.path,
                    graph_hash=self.graph_hash,
                    resumed=not fresh,
                )
            )
        if fresh:
            if self.rules is not None:
                run.rules = self.rules()
            run.schedule_entry()
            if run.persistence is not None:
                run.persistence.start(run)

    def _park_before(self, run: Run) -> bool:
        if run.persistence is None or run.skip_interrupt_before:
            run.skip_interrupt_before = False
            return False
        nodes = sorted({t.node for t in run.tasks if self.specs[t.node].interrupt_before})
        if not nodes:
            return False
        self._park(run, {"kind": "before", "nodes": nodes, "step": run.step + 1})
        return True

    def _park_after(self, run: Run, ran: Sequence[Task]) -> bool:
        if run.persistence is None:
            return False
        nodes = sorted({t.node for t in ran if self.specs[t.node].interrupt_after})
        if not nodes or not run.tasks:
            return False
        self._park(run, {"kind": "after", "nodes": nodes, "step": run.step})
        return True

    def _park(self, run: Run, interrupt: dict[str, Any]) -> None:
        assert run.persistence is not None
        run.persistence.park(run, interrupt)
        self._emit(
            run,
            RunInterrupted(
                run_id=run.run_id,
                step=run.step,
                path=run.path,
                node=interrupt.get("node"),
                payload=interrupt,
            ),
        )

    def _park_node(self, run: Run, outcome: StepOutcome) -> None:
        assert outcome.interrupt is not None
        task, signal = outcome.interrupt
        run.step -= 1  # the step was not committed; it re-runs on resume
        self._park(
            run,
            {
                "kind": "node",
                "node": task.node,
                "index": task.index,
                "step": run.step + 1,
                "seq": signal.seq,
                "payload": signal.payload,
            },
        )

    def _step_once(self, run: Run) -> bool:
        """Run and commit one step with the sync driver; ``False`` when the run parked."""
        if self._interrupts and self._park_before(run):
            return False
        run.step += 1
        if run.step > run.max_steps:
            run.check_step_limit()
        if run.emit is not None:
            self._emit_started(run, run.tasks)
        outcome = execute_sync(run, run.tasks, self._threads)
        if outcome.interrupt is not None:
            self._park_node(run, outcome)
            return False
        self._complete_step(run, outcome.results)
        if run.rule_park is not None:
            self._park(run, run.rule_park)
            return False
        return not (self._interrupts and self._park_after(run, [t for t, _ in outcome.results]))

    def _run_to_end(self, run: Run, *, fresh: bool) -> None:
        """Sync driver for invoke/resume: no generator on the hot path."""
        try:
            self._begin(run, fresh)
            while run.tasks:
                if not self._step_once(run):
                    return
            self._finish(run)
        except StargraphError as exc:
            self._fail(run, exc)
            raise
        finally:
            if run.rules is not None:
                run.rules.close()
                run.rules = None

    def _drive(self, run: Run, *, fresh: bool) -> Iterator[int]:
        """Sync driver for streams: yields after each committed step."""
        try:
            self._begin(run, fresh)
            while run.tasks:
                if not self._step_once(run):
                    return
                yield run.step
            self._finish(run)
        except StargraphError as exc:
            self._fail(run, exc)
            raise
        finally:
            if run.rules is not None:
                run.rules.close()
                run.rules = None

    async def _adrive(self, run: Run, *, fresh: bool) -> AsyncIterator[int]:
        """Async driver: yields after each committed step."""
        try:
            self._begin(run, fresh)
            while run.tasks:
                if self._interrupts and self._park_before(run):
                    return
                run.step += 1
                run.check_step_limit()
                self._emit_started(run, run.tasks)
                outcome = await execute_async(run, run.tasks, self._threads)
                if outcome.interrupt is not None:
                    self._park_node(run, outcome)
                    return
                self._complete_step(run, outcome.results)
                yield run.step
                if run.rule_park is not None:
                    self._park(run, run.rule_park)
                    return
                if self._interrupts and self._park_after(run, [t for t, _ in outcome.results]):
                    return
            self._finish(run)
        except StargraphError as exc:
            self._fail(run, exc)
            raise
        finally:
            if run.rules is not None:
                run.rules.close()
                run.rules = None

    def _stream(self, run: Run, buffer: list[Event], *, fresh: bool) -> Iterator[Event]:
        try:
            for _ in self._drive(run, fresh=fresh):
                yield from buffer
                buffer.clear()
        except StargraphError:
            # The consumer sees the failing step's events and run_failed before the error.
            yield from buffer
            raise
        yield from buffer

    def _complete_step(self, run: Run, results: list[tuple[Task, dict[str, Any]]]) -> None:
        ran = [task for task, _ in results]
        run.merge(results)
        run.schedule_next(ran)
        if run.rules is not None:
            self._apply_rules(run, ran)
        if run.emit is not None:
            for task, writes in sorted(results, key=lambda r: r[0].key):
                for child_event in run.child_events.pop(task.key, ()):
                    run.emit(child_event)
                run.emit(
                    NodeFinished(
                        run_id=run.run_id,
                        step=run.step,
                        path=run.path,
                        node=task.node,
                        index=task.index,
                        writes=jsonable(self.channels, writes),
                        attempts=run.attempts.get(f"{task.node}/{task.index}", 1),
                    )
                )
        if run.persistence is not None:
            run.persistence.commit(run, results)
        elif run.attempts:
            run.attempts = {}
        if run.emit is not None:
            run.emit(
                StepCompleted(
                    run_id=run.run_id,
                    step=run.step,
                    path=run.path,
                    nodes=tuple(t.node for t in ran),
                    next=tuple(t.node for t in run.tasks),
                )
            )

    def _apply_rules(self, run: Run, ran: Sequence[Task]) -> None:
        assert run.rules is not None
        decision = run.rules.decide(run.step, [t.node for t in ran], run.values)
        if decision.kind == "continue":
            return
        run.decision = {
            "kind": decision.kind,
            "rule": decision.rule,
            "targets": list(decision.targets),
            "reason": decision.reason,
        }
        self._emit(
            run,
            RuleDecided(
                run_id=run.run_id,
                step=run.step,
                path=run.path,
                decision=decision.kind,
                rule=decision.rule,
                target=",".join(decision.targets) or None,
                reason=decision.reason,
            ),
        )
        if decision.kind == "halt":
            run.tasks = ()
            run.stopped_by = decision.rule
        elif decision.kind == "interrupt":
            run.rule_park = {
                "kind": "rule",
                "rule": decision.rule,
                "reason": decision.reason,
                "step": run.step,
            }
        else:
            # goto replaces whatever the edges scheduled, Sends included.
            run.tasks = tuple(
                self.single_tasks[t][0] for t in sorted(set(decision.targets)) if t != END
            )

    def _finish(self, run: Run) -> None:
        if run.persistence is not None:
            run.persistence.finish(run, stopped_by=run.stopped_by)
        if run.emit is not None:  # the event dumps the whole state: only build it when seen
            run.emit(
                RunFinished(
                    run_id=run.run_id,
                    step=run.step,
                    path=run.path,
                    state=jsonable(self.channels, run.values),
                    stopped_by=run.stopped_by,
                )
            )

    def _fail(self, run: Run, exc: StargraphError) -> None:
        if run.persistence is not None and not isinstance(exc, CheckpointError):
            # A checkpoint error means the store itself refused; do not write through it.
            run.persistence.fail(run, str(exc))
        self._emit(
            run,
            RunFailed(
                run_id=run.run_id,
                step=run.step,
                path=run.path,
                node=getattr(exc, "node", None),
                error=str(exc),
                error_type=type(exc).__name__,
            ),
        )

    def _emit_started(self, run: Run, tasks: Sequence[Task]) -> None:
        if run.emit is not None:
            for task in tasks:
                run.emit(
                    NodeStarted(
                        run_id=run.run_id,
                        step=run.step,
                        path=run.path,
                        node=task.node,
                        index=task.index,
                    )
                )

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=32, thread_name_prefix=f"stargraph-{self.ir.name}"
            )
        return self._pool

    def close(self) -> None:
        """Release the worker threads (a compiled graph stays usable; they are re-created)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __repr__(self) -> str:
        return f"CompiledGraph({self.ir.name!r}, {self.graph_hash})"


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()
    )


def _decode(graph: CompiledGraph[Any], run_id: str, step: int, writes: Any) -> dict[str, Any]:
    from stargraph.runtime._durable import decode_writes

    return decode_writes(graph.channels, run_id, step, writes)
