"""``CompiledGraph``: run, stream, resume, fork and inspect runs of a compiled graph.

A run is a sequence of *steps*. In each step every scheduled task (node execution) runs -
a lone task right on the driver's thread; several concurrently (sync nodes on worker threads,
``inline`` ones on the driver's thread, async nodes on one event loop per run) - and then,
only when all have finished, their writes merge in ``(node, index)`` order through the
channels' reducers. Successors are scheduled from the merged state, and (with a store) the
step is committed before the next one starts. Nothing about the result or the order of the
typed events depends on which task finished first.

A live stream (``stream``/``astream``) hands on what the run's feed receives while a step
runs (see ``_stream``); ``iter`` steps the run one superstep per item.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from functools import cached_property
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel, ValidationError

from stargraph.checkpoint import (
    CheckpointStore,
    Recording,
    RunRecord,
)
from stargraph.errors import (
    CheckpointError,
    EngineError,
    InvalidInputError,
    ReplayError,
    RunCancelledError,
    StargraphError,
)
from stargraph.ir import END, GraphIR
from stargraph.runtime import _cancel, _threads
from stargraph.runtime._context import Entropy, SystemEntropy
from stargraph.runtime._durable import (
    Durability,
    Persistence,
    code_hash,
)
from stargraph.runtime._events import (
    Event,
    NodeFinished,
    NodeStarted,
    RuleDecided,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunStarted,
    StepCompleted,
)
from stargraph.runtime._interrupt import Interrupt, mark_interrupted
from stargraph.runtime._plan import NodeSpec, RouterSpec, Task
from stargraph.runtime._remote import Remote
from stargraph.runtime._replay import ReplayDriver
from stargraph.runtime._rules import RuleSet
from stargraph.runtime._run import MAX_STEPS_BOUND, Run, describe_exception, jsonable
from stargraph.runtime._stored import StoredRuns, _describe
from stargraph.runtime._stream import Feed, StreamMode, Superstep, stream_modes
from stargraph.runtime._tasks import StepOutcome, execute_async, execute_sync, worker_threads
from stargraph.runtime._threads import start_turn
from stargraph.state import Channel

__all__ = ["DEFAULT_MAX_STEPS", "MAX_STEPS_BOUND", "CompiledGraph"]

StateT = TypeVar("StateT", bound=BaseModel)

DEFAULT_MAX_STEPS = 10_000
"""Supersteps a run may take before :class:`StepLimitExceeded` (override per compile/run)."""

_log = logging.getLogger("stargraph")


class CompiledGraph(StoredRuns[StateT]):
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
        self._interrupts = any(s.interrupt_before or s.interrupt_after for s in specs.values())
        self._observer_failures = 0
        self._observer_lock = threading.Lock()
        # Async routers are awaited by the async driver before it schedules.
        self._async_routers = any(r.is_async for r in self.start_routers) or any(
            r.is_async for spec in specs.values() for r in spec.routers
        )

    @property
    def observer_failures(self) -> int:
        """How many times the ``on_event`` observer (a plugin hook) raised. A failing
        observer never stops a run: each failure is logged on the ``stargraph`` logger and
        counted here, and the run goes on."""
        return self._observer_failures

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
        fns += [spec.input for spec in self.specs.values() if spec.input is not None]
        return code_hash(fns)

    # ------------------------------------------------------------------ running

    def invoke(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> StateT:
        """Run to the end (or to an interrupt) and return the state reached.

        With ``thread_id`` the run is the next turn of that thread: it starts from the state
        the thread's last turn finished with, ``input`` applied through the reducers (see
        ``runtime._threads``; needs a store)."""
        self._refuse_unknown_keys(input, run_id)
        run = self._new_run(input, run_id, max_steps, emit=None, thread_id=thread_id)
        self._run_to_end(run, fresh=True)
        return self._result(run)

    @overload
    def stream(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        mode: Literal["events"] = "events",
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> Iterator[Event]: ...

    @overload
    def stream(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode],
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> Iterator[Any]: ...

    def stream(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode] = "events",
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> Iterator[Any]:
        """Run to the end, yielding what happens as it happens.

        ``mode`` picks what: ``"events"`` (the typed run events; the default), ``"updates"``
        (``{node: writes}`` for each finished node), ``"values"`` (the state after each
        step), ``"custom"`` (a :class:`~stargraph.runtime.CustomEvent` per ``ctx.emit``) or
        ``"messages"`` (a :class:`~stargraph.runtime.MessageChunk` per piece of a model's
        answer). With a list of modes, items come as ``(mode, item)`` pairs. A consumer
        that stops reading cancels the run at the step it reached. ``thread_id``: as in
        :meth:`invoke`.
        """
        modes = stream_modes(mode)
        self._refuse_unknown_keys(input, run_id)
        yield from self._live(
            lambda emit: self._new_run(input, run_id, max_steps, emit=emit, thread_id=thread_id),
            modes,
            fresh=True,
        )

    async def ainvoke(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> StateT:
        """Async :meth:`invoke`: async nodes of one step run concurrently on this loop."""
        self._refuse_unknown_keys(input, run_id)
        run = self._new_run(input, run_id, max_steps, emit=None, thread_id=thread_id)
        async for _ in self._adrive(run, fresh=True):
            pass
        return self._result(run)

    @overload
    def astream(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        mode: Literal["events"] = "events",
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> AsyncIterator[Event]: ...

    @overload
    def astream(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode],
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> AsyncIterator[Any]: ...

    async def astream(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode] = "events",
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> AsyncIterator[Any]:
        """Async :meth:`stream` (same modes)."""
        modes = stream_modes(mode)
        self._refuse_unknown_keys(input, run_id)
        feed = Feed(modes)
        feed.loop = asyncio.get_running_loop()
        feed.awake = asyncio.Event()
        run = self._new_run(input, run_id, max_steps, emit=self._feeder(feed), thread_id=thread_id)
        self._attach(run, feed)
        drive = self._adrive(run, fresh=True)
        try:
            async for _ in drive:
                for item in self._items(feed, modes):
                    yield item
        except StargraphError:
            for item in self._items(feed, modes):
                yield item
            raise
        finally:
            await drive.aclose()  # a consumer that stops reading cancels the run (see stream)
        for item in self._items(feed, modes):
            yield item

    def iter(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> Iterator[Superstep]:
        """Run one superstep at a time: yields a :class:`~stargraph.runtime.Superstep` (what
        ran, what runs next, the state) after each committed step. The next step starts
        only when the next one is asked for; closing the iterator (or leaving the ``for``)
        between steps cancels the run there, as closing a stream does. ``thread_id``: as in
        :meth:`invoke`."""
        self._refuse_unknown_keys(input, run_id)
        run = self._new_run(input, run_id, max_steps, emit=None, thread_id=thread_id)
        drive = self._drive(run, fresh=True)
        try:
            for step in drive:
                yield Superstep(
                    run_id=run.run_id,
                    step=step,
                    nodes=tuple(t.node for t in run.ran),
                    next=tuple(t.node for t in run.tasks),
                    state=self._state(run),
                )
        finally:
            drive.close()

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

    def get_thread(self, thread_id: str) -> list[RunRecord]:
        """The runs of a thread, one per turn, in turn order; the last one's final state is
        the conversation so far (``get_state(runs[-1].run_id)``). Raises
        :class:`~stargraph.errors.ThreadNotFoundError` for a thread with no run."""
        return _threads.get_thread(self, thread_id)

    def threads(self, *, limit: int = 100) -> list[RunRecord]:
        """The latest turn of each thread in the store, newest first."""
        return _threads.list_threads(self, limit)

    def _recording(self, source: str | Recording) -> Recording:
        if isinstance(source, Recording):
            return source
        return Recording.from_store(self._require_store(), source)

    # ------------------------------------------------------------------ internals

    def _new_run(
        self,
        input: Mapping[str, Any] | BaseModel | None,
        run_id: str | None,
        max_steps: int | None,
        emit: Callable[[Event], None] | None,
        thread_id: str | None = None,
    ) -> Run:
        run_id = run_id or f"run-{os.urandom(8).hex()}"
        turn = None if thread_id is None else start_turn(self, input, thread_id, run_id)
        values = self._initial_values(input, run_id) if turn is None else turn.values
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
            if turn is not None:
                run.persistence.thread = (turn.thread_id, turn.number)
        return run

    def _observed(self, emit: Callable[[Event], None] | None) -> Callable[[Event], None] | None:
        """``emit`` plus the ``on_event`` observer (plugins), when there is one. The observer
        is isolated: whatever it raises is logged and counted, never aborts the step."""
        observer = self.on_event
        if observer is None:
            return emit

        def observe(event: Event) -> None:
            try:
                observer(event)
            except Exception as exc:
                self._observer_failed(event, exc)

        if emit is None:
            return observe

        def both(event: Event) -> None:
            emit(event)
            observe(event)

        return both

    def _observer_failed(self, event: Event, exc: Exception) -> None:
        with self._observer_lock:
            self._observer_failures += 1
        _log.warning(
            "the on_event observer of graph %r raised on %s of run %r at step %d (%s); the "
            "run goes on without it - fix or remove the plugin",
            self.ir.name,
            event.kind,
            event.run_id,
            event.step,
            describe_exception(exc),
            exc_info=exc,
        )

    def _refuse_unknown_keys(self, input: Any, run_id: str | None) -> None:
        """A key of a run's input that names no channel is a typo, not something to drop."""
        model = self.state_model
        if not isinstance(input, Mapping) or model.model_config.get("extra") == "allow":
            return
        known = set(model.model_fields)
        known.update(f.alias for f in model.model_fields.values() if f.alias)
        unknown = sorted(str(key) for key in input if key not in known)
        if unknown:
            names = ", ".join(repr(k) for k in unknown)
            run = f" of run {run_id!r}" if run_id else ""
            raise InvalidInputError(
                f"input{run} has {'a key' if len(unknown) == 1 else 'keys'} {names} that "
                f"{model.__name__} has no field for; its fields are "
                f"{', '.join(sorted(model.model_fields))} (fix the spelling, or add the field "
                "to the state model)",
                run_id=run_id,
                step=0,
            )

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

    def _state(self, run: Run) -> StateT:
        return self.state_model.model_validate(run.values)

    def _result(self, run: Run) -> StateT:
        # What invoke/resume return: the state, marked when the run stopped at an interrupt.
        state = self._state(run)
        if run.interrupt is not None:
            mark_interrupted(state, Interrupt.from_stored(run.run_id, run.interrupt))
        return state

    def _emit(self, run: Run, event: Event) -> None:
        if run.emit is not None:
            run.emit(event)

    def _begin(self, run: Run, fresh: bool) -> None:
        # Registered while it executes, so that cancel() and signals can reach it.
        _cancel.ACTIVE[id(run)] = run
        if _cancel.SIGNALLED.reason is not None and run.cancelled is None:
            run.cancelled = _cancel.SIGNALLED.reason
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
        run.interrupt = interrupt
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
        if not self._start_step(run):
            return False
        return self._end_step(run, execute_sync(run, run.tasks, self._threads))

    def _start_step(self, run: Run) -> bool:
        """Open the next step (``False``: the run parked before it instead)."""
        if self._interrupts and self._park_before(run):
            return False
        run.step += 1
        if run.step > run.max_steps:
            run.check_step_limit()
        if run.emit is not None:
            self._emit_started(run, run.tasks)
        return True

    def _end_step(self, run: Run, outcome: StepOutcome) -> bool:
        """Commit the step its tasks produced ``outcome`` for (``False``: the run parked)."""
        if outcome.interrupt is not None:
            self._park_node(run, outcome)
            return False
        self._complete_step(run, outcome.results)
        return self._parked_after(run, outcome)

    def _parked_after(self, run: Run, outcome: StepOutcome) -> bool:
        if run.rule_park is not None:
            self._park(run, run.rule_park)
            return False
        return not (self._interrupts and self._park_after(run, [t for t, _ in outcome.results]))

    def _all_inline(self, tasks: Sequence[Task]) -> bool:
        specs = self.specs
        return all(specs[t.node].inline and not specs[t.node].is_async for t in tasks)

    def _pumped(
        self, run: Run, feed: Feed, stepper: concurrent.futures.Executor
    ) -> Generator[int, None, StepOutcome]:
        """Execute the step's tasks on ``stepper`` while handing the consumer what the
        feed receives meanwhile (yields -1 for that); returns the step's outcome. Closed
        in the middle of the step, it lets the step finish and commits it first (see
        :meth:`_drive`)."""
        stepping = stepper.submit(execute_sync, run, run.tasks, self._threads)
        stepping.add_done_callback(feed.signal)
        try:
            while not stepping.done():
                feed.wait()
                if feed.items:
                    yield -1
        except GeneratorExit:
            concurrent.futures.wait([stepping])
            self._close_in_step(run, stepping)
            raise
        return stepping.result()

    def _close_in_step(self, run: Run, stepping: concurrent.futures.Future[StepOutcome]) -> None:
        """The consumer closed the stream while a step ran: as with ``cancel()``, that step
        commits (its effects happened), then the run is cancelled (or finished) there."""
        try:
            if self._end_step(run, stepping.result()):
                self._closed(run)
        except RunCancelledError as exc:
            if run.cancelled is None:
                self._fail(run, exc)
            else:
                self._cancel_in_flight(run)
        except StargraphError as exc:
            self._fail(run, exc)
        except Exception as exc:
            self._engine_failed(run, exc)

    # The drivers below share one shape. The loop checks ``run.cancelled`` before each step
    # (a step boundary) and leaves it to stop the run after the ``try``: cancelling is not
    # a failure. A RunCancelledError met inside a step comes from a nested run; BaseException
    # (KeyboardInterrupt, SystemExit) stops the run at once, abandoning its lease.

    def _run_to_end(self, run: Run, *, fresh: bool) -> None:
        """Sync driver for invoke/resume: no generator on the hot path."""
        try:
            self._begin(run, fresh)
            while run.tasks:
                if run.cancelled is not None:
                    break
                if not self._step_once(run):
                    return
            else:
                self._finish(run)
                return
        except RunCancelledError as exc:
            if run.cancelled is None:  # only a nested run was asked to stop: its node failed
                self._fail(run, exc)
                raise
            raise self._cancel_in_flight(run) from exc
        except StargraphError as exc:
            self._fail(run, exc)
            raise
        except Exception as exc:
            raise self._engine_failed(run, exc) from exc
        except BaseException as exc:
            self._abandon(run, exc)
            raise
        finally:
            self._end(run)
        raise self._cancel(run)

    def _drive(self, run: Run, *, fresh: bool) -> Generator[int, None, None]:
        """Sync driver for streams and ``iter``: yields after each committed step, and -1
        whenever a live stream's feed has something new while a step runs."""
        feed = run.feed
        # A live stream runs each step's tasks on a thread of its own, so that this driver
        # (the consumer's thread) hands on events while they run.
        stepper = (
            None
            if feed is None
            else concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stargraph-step")
        )
        closed_in_step = False
        try:
            self._begin(run, fresh)
            while run.tasks:
                if run.cancelled is not None:
                    break
                if feed is None or stepper is None or self._all_inline(run.tasks):
                    # Nothing to hand on while the tasks run: inline ones (tiny pure
                    # functions) run right here, sparing the thread hop.
                    if not self._step_once(run):
                        return
                else:
                    if not self._start_step(run):
                        return
                    closed_in_step = True
                    outcome = yield from self._pumped(run, feed, stepper)
                    closed_in_step = False
                    if not self._end_step(run, outcome):
                        return
                yield run.step
            else:
                self._finish(run)
                return
        except GeneratorExit:
            # The consumer closed the stream: at a step boundary, where it waits at the
            # yield, or inside a step (then _pumped committed that step already).
            if not closed_in_step:
                self._closed(run)
            raise
        except RunCancelledError as exc:
            if run.cancelled is None:  # only a nested run was asked to stop: its node failed
                self._fail(run, exc)
                raise
            raise self._cancel_in_flight(run) from exc
        except StargraphError as exc:
            self._fail(run, exc)
            raise
        except Exception as exc:
            raise self._engine_failed(run, exc) from exc
        except BaseException as exc:
            self._abandon(run, exc)
            raise
        finally:
            if stepper is not None:
                stepper.shutdown(wait=False)
            self._end(run)
        raise self._cancel(run)

    async def _adrive(self, run: Run, *, fresh: bool) -> AsyncGenerator[int, None]:
        """Async driver: yields after each committed step, and -1 whenever a live stream's
        feed has something new while a step runs. Async routers are awaited on this loop."""
        feed = run.feed
        stepping: asyncio.Future[StepOutcome] | None = None
        try:
            if fresh and self._async_routers:
                await run.await_routers([("__start__", self.start_routers)])
            self._begin(run, fresh)
            while run.tasks:
                if run.cancelled is not None:
                    break
                if not self._start_step(run):
                    return
                if feed is None:
                    outcome = await execute_async(run, run.tasks, self._threads)
                else:
                    stepping = asyncio.ensure_future(execute_async(run, run.tasks, self._threads))
                    stepping.add_done_callback(feed.signal)
                    while not stepping.done():
                        await feed.await_wake()
                        if feed.items:
                            yield -1
                    outcome, stepping = stepping.result(), None
                if outcome.interrupt is not None:
                    self._park_node(run, outcome)
                    return
                if self._async_routers:
                    run.merge(outcome.results)
                    done = sorted({t.node for t, _ in outcome.results})
                    await run.await_routers([(n, self.specs[n].routers) for n in done])
                    self._complete_step(run, outcome.results, merged=True)
                else:
                    self._complete_step(run, outcome.results)
                if not self._parked_after(run, outcome):
                    return
                # After the parks: a consumer that stops reading here cancels a running run.
                yield run.step
            else:
                self._finish(run)
                return
        except GeneratorExit:
            if stepping is not None:
                # Closed inside a step: its tasks are cancelled and the step dropped.
                stepping.cancel()
                await asyncio.gather(stepping, return_exceptions=True)
                run.step -= 1
                self._cancel_quietly(run, "its event stream was closed")
            else:
                self._closed(run)
            raise
        except asyncio.CancelledError:
            # The task was cancelled where it awaited, inside a step: that step is dropped.
            if stepping is not None:
                stepping.cancel()
            run.step -= 1
            self._cancel_quietly(run, "its asyncio task was cancelled")
            raise
        except RunCancelledError as exc:
            if run.cancelled is None:  # only a nested run was asked to stop: its node failed
                self._fail(run, exc)
                raise
            raise self._cancel_in_flight(run) from exc
        except StargraphError as exc:
            self._fail(run, exc)
            raise
        except Exception as exc:
            raise self._engine_failed(run, exc) from exc
        except BaseException as exc:
            self._abandon(run, exc)
            raise
        finally:
            self._end(run)
        raise self._cancel(run)

    def _live(
        self,
        make_run: Callable[[Callable[[Event], None]], Run],
        modes: tuple[str, ...],
        *,
        fresh: bool,
    ) -> Iterator[Any]:
        """Stream the run ``make_run`` builds (given its emit function) in ``modes``."""
        feed = Feed(modes)
        run = make_run(self._feeder(feed))
        self._attach(run, feed)
        return self._stream(run, feed, modes, fresh=fresh)

    def _attach(self, run: Run, feed: Feed) -> None:
        run.feed = feed
        feed.snapshot = lambda: self._state(run)

    def _stream(
        self, run: Run, feed: Feed, modes: tuple[str, ...], *, fresh: bool
    ) -> Iterator[Any]:
        drive = self._drive(run, fresh=fresh)
        try:
            for _ in drive:
                yield from self._items(feed, modes)
        except StargraphError:
            # The consumer sees the failing step's events and run_failed before the error.
            yield from self._items(feed, modes)
            raise
        finally:
            # A consumer that stops reading cancels the run at the step it reached, now
            # rather than whenever the driver is garbage collected.
            drive.close()
        yield from self._items(feed, modes)

    @staticmethod
    def _items(feed: Feed, modes: tuple[str, ...]) -> list[Any]:
        """What the consumer gets of the feed's items: items of one mode, else pairs."""
        items = feed.drain()
        if len(modes) == 1:
            return [item for _, item in items]
        return items

    def _feeder(self, feed: Feed) -> Callable[[Event], None]:
        """The emit function of a streamed run: its events, as the feed's modes want them."""
        modes = feed.modes
        events, updates, values = "events" in modes, "updates" in modes, "values" in modes

        def emit(event: Event) -> None:
            if events:
                feed.put("events", event)
            if event.path:
                return  # a subgraph's events: its updates and values are the parent's
            if updates and isinstance(event, NodeFinished):
                assert event.node is not None
                feed.put("updates", {event.node: event.writes})
            elif values and isinstance(event, StepCompleted | RunStarted):
                # The state when the run starts, then after each step.
                assert feed.snapshot is not None
                feed.put("values", feed.snapshot())

        return emit  # the run adds the on_event observer (see _observed)

    # ------------------------------------------------------------------ stopping early

    def cancel(self, run_id: str, *, reason: str = "cancel() was called") -> bool:
        """Ask run ``run_id`` of this graph, executing in this process (in any thread), to
        stop at its next step boundary; returns whether such a run was found.

        The step in flight finishes and commits; then the run is stored as ``cancelled`` at
        that step (``stopped_by`` is ``reason``), its lease is released, and the call that
        runs it (``invoke``, ``resume``, a stream) raises
        :class:`~stargraph.errors.RunCancelledError`; ``resume(run_id)`` continues it. The
        nested runs of its subgraph nodes are cancelled with it. A run executing in another
        process is stopped by signalling that process (see
        :func:`~stargraph.runtime.cancel_on_signals`); a parked or failed run needs no
        cancelling. Safe to call from any thread.
        """
        return _cancel.request(self, run_id, reason)

    def _end(self, run: Run) -> None:
        """However a driver leaves: close the rule engines and the run's event loop,
        unregister the run."""
        if run.rules is not None:
            run.rules.close()
            run.rules = None
        if run.loop is not None:
            run.close_loop()
        _cancel.ACTIVE.pop(id(run), None)

    def _cancel(self, run: Run) -> RunCancelledError:
        """Stop the run at this step boundary: store it as cancelled; the error to raise."""
        reason = run.cancelled or "cancelled"
        if run.persistence is not None:
            run.persistence.cancel(run, reason)
        self._emit(
            run, RunCancelled(run_id=run.run_id, step=run.step, path=run.path, reason=reason)
        )
        then = (
            f"continue it with resume({run.run_id!r})"
            if run.persistence is not None
            else "it had no checkpoint store, so it cannot be resumed"
        )
        return RunCancelledError(
            f"run {run.run_id!r} was cancelled ({reason}) and stopped after step {run.step}, "
            f"its last committed step; {then}",
            run_id=run.run_id,
            step=run.step,
            reason=reason,
        )

    def _cancel_in_flight(self, run: Run) -> RunCancelledError:
        """A nested run (a subgraph node's, or one a node invoked) stopped inside the step
        in flight, and this run was asked to stop too: it stops at its last committed step
        (the step runs again on resume, resuming the nested run)."""
        run.step -= 1  # the step in flight was not committed
        return self._cancel(run)

    def _closed(self, run: Run) -> None:
        """The consumer closed the run's event stream at a step boundary: the run is
        cancelled there, or finished if that step was its last."""
        if run.tasks:
            self._cancel_quietly(run, "its event stream was closed")
            return
        try:
            self._finish(run)
        except Exception as exc:  # as in _cancel_quietly: nobody waits for this error
            _log.warning("run %r could not be marked done (%s)", run.run_id, exc)
            if run.persistence is not None:
                run.persistence.abandon()

    def _cancel_quietly(self, run: Run, reason: str) -> None:
        """Cancel the run where nobody waits for the error (a closed stream, a cancelled
        task); a store that refuses is logged and the run abandoned instead."""
        run.cancelled = run.cancelled or reason
        try:
            self._cancel(run)
        except Exception as exc:  # the store refused; the lease must go all the same
            _log.warning(
                "run %r could not be marked cancelled (%s); it shows as orphaned instead",
                run.run_id,
                describe_exception(exc),
            )
            if run.persistence is not None:
                run.persistence.abandon()

    def _abandon(self, run: Run, exc: BaseException) -> None:
        """Stop at once (KeyboardInterrupt, SystemExit, a second signal): write nothing
        more, but give the lease up so the run shows as orphaned and resumes at once."""
        if run.persistence is not None and run.persistence.lease is not None:
            run.persistence.abandon()
            exc.add_note(
                f"run {run.run_id!r} stopped at once; it shows as 'orphaned' until resumed "
                f"from its last committed step: resume({run.run_id!r})"
            )

    def _complete_step(
        self, run: Run, results: list[tuple[Task, dict[str, Any]]], *, merged: bool = False
    ) -> None:
        ran = [task for task, _ in results]
        run.ran = ran
        if not merged:
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
        rules = run.rules
        assert rules is not None
        if not rules.applies(ran):
            return  # e.g. a ReAct act step: no engine watches it
        decision = rules.decide(run.step, [t.node for t in ran], run.values)
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

    def _engine_failed(self, run: Run, exc: Exception) -> EngineError:
        """An untyped exception escaped the engine (nodes' own errors are NodeErrors by now):
        mark the run failed with it, like any other error, and return the typed error."""
        error = EngineError(
            f"run {run.run_id!r} failed at step {run.step} inside the engine, not in a node: "
            f"{describe_exception(exc)}; the run is marked failed and can be resumed once the "
            "cause (a store, service or plugin that raised, or a bug in stargraph) is fixed",
            run_id=run.run_id,
            step=run.step,
        )
        self._fail(run, error)
        return error

    def _fail(self, run: Run, exc: StargraphError) -> None:
        persistence = run.persistence
        if persistence is not None:
            if isinstance(exc, CheckpointError) and exc.run_id in (None, run.run_id):
                # The store itself refused this run (or its lease was lost): write nothing
                # more through it, but let the lease go so the run shows as orphaned.
                persistence.abandon()
            else:
                try:
                    persistence.fail(run, str(exc))
                except Exception as store_exc:
                    # The run cannot be marked failed (not created yet, or the store is
                    # down): the error itself must still reach the caller.
                    persistence.abandon()
                    exc.add_note(
                        f"run {run.run_id!r} could not be marked failed in its store: "
                        f"{describe_exception(store_exc)}"
                    )
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

    @staticmethod
    def _threads() -> concurrent.futures.ThreadPoolExecutor:
        # Shared by every graph of the process: a graph compiled per run (as a worker does)
        # reuses the same threads, and what nodes keep per thread, rather than adding its own.
        return worker_threads()

    def close(self) -> None:
        """Kept for compatibility: the worker threads are shared by every compiled graph of
        the process and idle between steps, so a graph holds nothing to release (it stays
        usable either way)."""

    def __repr__(self) -> str:
        return f"CompiledGraph({self.ir.name!r}, {self.graph_hash})"
