"""The step loop: how a run of a compiled graph goes from step to step.

A run is a sequence of *steps*. In each step every scheduled task (node execution) runs -
a lone task right on the driver's thread; several concurrently (sync nodes on worker threads,
``inline`` ones on the driver's thread, async nodes on one event loop per run) - and then,
only when all have finished, their writes merge in ``(node, index)`` order through the
channels' reducers. Successors are scheduled from the merged state, rules decide, and (with
a store) the step is committed before the next one starts. Nothing about the result or the
order of the typed events depends on which task finished first.

:class:`StepLoop` is that loop for one compiled graph: it starts runs (``new_run``), opens
a step (``prepare``), commits what its tasks produced (``complete``), and ends runs
(``finish``, ``fail``, ``cancel``). ``advance`` strings those together into the one loop,
a generator of the work to do (tasks to run, async routers to await); the drivers -
``run_to_end`` (invoke, resume), ``drive`` (streams, ``iter``) and ``adrive`` (the async
API) - only do that work, each in its way. It sits
between the plan and runs below it and the ``CompiledGraph`` facade above it, and knows
nothing of the facade: stored runs (``_stored``) and replay (``_replay``) use it directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import (
    AsyncGenerator,
    Callable,
    Coroutine,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from functools import partial
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from stargraph.errors import (
    CheckpointError,
    EngineError,
    RunCancelledError,
    StargraphError,
)
from stargraph.ir import END
from stargraph.runtime._cancel import ACTIVE, SIGNALLED
from stargraph.runtime._durable import Persistence
from stargraph.runtime._events import (
    Event,
    RuleDecided,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunStarted,
    made,
    node_finished,
    node_started,
    step_completed,
)
from stargraph.runtime._interrupts import Interrupt, RuleDecision, interrupt_id
from stargraph.runtime._plan import Plan, Task, by_task, unmet_error
from stargraph.runtime._remote import Remote
from stargraph.runtime._run import Run, describe_exception, initial_values, jsonable
from stargraph.runtime._schemas import boundary_input
from stargraph.runtime._settings import RunSettings
from stargraph.runtime._stream import INTERRUPT_KEY, Feed
from stargraph.runtime._tasks import (
    Handoff,
    LocalRunner,
    StepOutcome,
    TaskRunner,
    execute_sync,
    worker_threads,
)
from stargraph.runtime._threads import start_turn
from stargraph.runtime._values import GOTO_KEY, ROUTING_KEYS, state_of, values_item

__all__ = ["StepLoop", "Work"]

Work = Sequence[Task] | Coroutine[Any, Any, None] | int
"""What :meth:`StepLoop.advance` hands its driver: a step's tasks to run, async routers to
await, or the number of the step just committed."""

_log = logging.getLogger("stargraph")


class StepLoop:
    """The step loop of one compiled graph: runs its plan's runs, step by step, with its
    store and options (see the module docstring)."""

    def __init__(
        self,
        plan: Plan,
        options: RunSettings,
        *,
        on_event: Callable[[Event], None] | None,
        remote: Remote | None,
    ) -> None:
        self.plan = plan
        # The compile options (a RunOptions from the compiler), read as each run starts.
        self.options = options
        # The store also as an attribute of its own: stored runs and replays read it.
        self.store = options.store
        if options.store is not None:
            # Every stored run's record names the hash of the graph's code: read and hash
            # the nodes' source (milliseconds) with the graph, not inside its first run.
            _ = plan.code_hash
        # Sees every event of every run (the plugin hook on_event); building events has a
        # cost, so only graphs with an observer pay it on invoke().
        self.on_event = on_event
        self.remote = remote
        # Runs the tasks of every step of a live run (a replay brings its own runner).
        self.runner = LocalRunner(worker_threads, remote)
        self.observer_failures = 0
        self._observer_lock = threading.Lock()
        # A values stream's items: cheap copies where they equal validated states.
        self._values_item = values_item(plan.state_model)

    def new_run(
        self,
        input: Mapping[str, Any] | BaseModel | None,
        run_id: str | None,
        max_steps: int | None,
        emit: Callable[[Event], None] | None,
        thread_id: str | None = None,
        *,
        valid: bool = False,
    ) -> Run:
        """A new run of the plan from ``input`` (or, with ``thread_id``, as the next turn
        of that thread), with this graph's store and options; not started yet. ``valid``:
        ``input`` is a dict of every channel's value, valid already (a subgraph node's
        projection of a parent state of the same model), taken as it is."""
        if self.plan.unmet_requires:
            raise unmet_error(self.plan.unmet_requires)
        run_id = run_id or f"run-{os.urandom(8).hex()}"
        if not valid and (self.plan.input_model is not None or self.plan.private):
            input = boundary_input(self.plan.input_model, self.plan.private, input, run_id)
        turn = (
            None
            if thread_id is None
            else start_turn(self.plan, self.store, input, thread_id, run_id)
        )
        if turn is not None:
            values = turn.values
        elif valid:
            assert isinstance(input, dict)
            values = input
        else:
            values = initial_values(self.plan.state_model, input, run_id)
        run = self.make_run(run_id, values, max_steps=max_steps, emit=self.observed(emit))
        if self.store is not None:
            run.persistence = Persistence(
                self.plan,
                self.store,
                durability=self.options.durability,
                snapshot_every=self.options.snapshot_every,
            )
            if turn is not None:
                run.persistence.thread = (turn.thread_id, turn.number)
        if turn is not None:
            run.thread = turn.thread_id
        return run

    def make_run(
        self,
        run_id: str,
        values: dict[str, Any],
        *,
        max_steps: int | None = None,
        emit: Callable[[Event], None] | None = None,
    ) -> Run:
        """A run of the plan over channel ``values``, with this graph's entropy and step
        limit (unless ``max_steps``), handing its events to ``emit``; not started yet."""
        return Run(
            self.plan,
            run_id,
            values,
            max_steps=self.options.max_steps if max_steps is None else max_steps,
            entropy=self.options.entropy(),
            emit=emit,
        )

    def observed(self, emit: Callable[[Event], None] | None) -> Callable[[Event], None] | None:
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
            self.observer_failures += 1
        _log.warning(
            "the on_event observer of graph %r raised on %s of run %r at step %d (%s); the "
            "run goes on without it - fix or remove the plugin",
            self.plan.ir.name,
            event.kind,
            event.run_id,
            event.step,
            describe_exception(exc),
            exc_info=exc,
        )

    def state(self, run: Run) -> BaseModel:
        """The run's state, as an instance of the state model of its own (a ``values``
        item: changing it changes neither the run nor a later item)."""
        item = self._values_item
        if item is None:
            return state_of(self.plan.state_model, run.values, run.run_id, run.step)
        return item(run.values)

    def emit(self, run: Run, kind: type[Event], **fields: Any) -> None:
        """Hand the run's emit function an event of ``kind`` about it (its id, step and
        path, and ``fields``), when someone listens. Callers whose fields cost something
        to build (a state dump) check ``run.emit`` first."""
        if run.emit is not None:
            fields["run_id"], fields["step"], fields["path"] = run.run_id, run.step, run.path
            run.emit(made(kind, fields))

    def begin(self, run: Run, fresh: bool) -> None:
        """Start executing ``run``: register it for cancellation, emit ``run_started``, and
        for a ``fresh`` run make its rule engines, schedule the entry and create it in the store."""
        # Registered while it executes, so that cancel() and signals can reach it.
        ACTIVE[run] = None
        if SIGNALLED.reason is not None and run.cancelled is None:
            run.cancelled = SIGNALLED.reason
        if run.emit is not None:
            self.emit(
                run,
                RunStarted,
                graph_hash=self.plan.graph_hash,
                resumed=not fresh,
            )
        feed = run.feed
        if feed is not None and feed.values and not run.path:
            feed.add("values", self.state(run))  # the state the run starts from
        if fresh:
            if self.plan.rules is not None:
                run.rules = self.plan.rules()
            run.schedule_entry()
            if run.persistence is not None:
                run.persistence.start(run)

    def _interrupted_before(self, run: Run) -> bool:
        if run.persistence is None or run.skip_interrupt_before:
            run.skip_interrupt_before = False
            return False
        nodes = sorted({t.node for t in run.tasks if self.plan.specs[t.node].interrupt_before})
        if not nodes:
            return False
        self._stop_at(run, Interrupt(kind="before", nodes=tuple(nodes), step=run.step + 1))
        return True

    def _interrupted_after(self, run: Run, ran: Sequence[Task]) -> bool:
        if run.persistence is None:
            return False
        nodes = sorted({t.node for t in ran if self.plan.specs[t.node].interrupt_after})
        if not nodes or not run.tasks:
            return False
        self._stop_at(run, Interrupt(kind="after", nodes=tuple(nodes), step=run.step))
        return True

    def _stop_at(self, run: Run, interrupt: Interrupt) -> None:
        assert run.persistence is not None
        stored = interrupt.record()
        run.persistence.interrupted(run, stored)
        run.interrupt = interrupt
        self.emit(
            run,
            RunInterrupted,
            node=interrupt.node,
            payload=stored,
        )
        feed = run.feed
        if feed is not None and not run.path:
            # The stream ends here either way; the marker tells its consumer that the run
            # waits (and for what) rather than finished, as LangGraph's streams do.
            found = Interrupt.read(stored, run_id=run.run_id)
            marker = {INTERRUPT_KEY: found.pending if found is not None else ()}
            if feed.updates:
                feed.add("updates", marker)
            if feed.values:
                feed.add("values", marker)

    def _node_interrupted(self, run: Run, outcome: StepOutcome) -> None:
        assert outcome.interrupt is not None
        run.step -= 1  # the step was not committed; it re-runs on resume
        step = run.step + 1
        asked = [
            Interrupt(
                kind="node",
                node=task.node,
                index=task.index,
                step=step,
                seq=signal.seq,
                payload=signal.payload,
                id=interrupt_id(run.run_id, step, task.node, task.index, signal.seq),
            )
            for task, signal in outcome.interrupt
        ]
        first = asked[0]
        self._stop_at(
            run, first.model_copy(update={"also": tuple(asked[1:])}) if len(asked) > 1 else first
        )

    def step_once(self, run: Run, runner: TaskRunner) -> bool:
        """Run and commit one step, its tasks run by ``runner`` (a replay's); ``False``
        when the run stopped at an interrupt."""
        tasks = self.prepare(run)
        if tasks is None:
            return False
        return self.complete(run, runner.run_step(run, tasks))

    def prepare(self, run: Run) -> Sequence[Task] | None:
        """Open the next step; its work, the tasks a runner is to run (``None``: the run
        stopped at an interrupt before the step instead)."""
        if self.plan.interrupts and self._interrupted_before(run):
            return None
        run.step += 1
        if run.step > run.max_steps:
            run.check_step_limit()
        if self.plan.sited:
            run.activate(run.tasks)
        if run.emit is not None:
            self.emit_started(run, run.tasks)
        return run.tasks

    def routing(
        self, run: Run, outcome: StepOutcome | None = None
    ) -> Coroutine[Any, Any, None] | None:
        """The async routers about to route, handed back as work for the async driver to
        await on its loop: those out of START before a fresh run begins (no ``outcome``),
        else those out of the nodes that produced ``outcome``, once their writes are merged
        (then ``complete(..., merged=True)``). ``None`` when there are none; a sync driver
        runs async routers on the run's own loop as it schedules."""
        if not self.plan.async_routers:
            return None
        if outcome is None:
            return run.await_routers([("__start__", self.plan.start_routers)])
        if outcome.interrupt is not None:
            return None
        run.merge(outcome.results)
        done = sorted({t.node for t, _ in outcome.results})
        return run.await_routers([(n, self.plan.specs[n].routers) for n in done])

    def complete(self, run: Run, outcome: StepOutcome, *, merged: bool = False) -> bool:
        """Commit the step its tasks produced ``outcome`` for, its writes ``merged`` already
        or not (``False``: the run stopped at an interrupt instead)."""
        if outcome.interrupt is not None:
            self._node_interrupted(run, outcome)
            return False
        self.commit(run, outcome.results, merged=merged)
        if run.rule_interrupt is None and not self.plan.interrupts:
            return True  # no interrupt to stop at: the common case, without the call
        return self._goes_on_after(run, outcome)

    def _goes_on_after(self, run: Run, outcome: StepOutcome) -> bool:
        if run.rule_interrupt is not None:
            if run.replay is not None:
                # A recorded rule interrupt was answered by the recorded resume: the replay
                # goes on to the step the record holds next.
                run.rule_interrupt = None
                return True
            self._stop_at(run, run.rule_interrupt)
            return False
        ran = [t for t, _ in outcome.results]
        return not (self.plan.interrupts and self._interrupted_after(run, ran))

    def _all_inline(self, tasks: Sequence[Task]) -> bool:
        if not self.plan.any_inline:
            return False
        specs = self.plan.specs
        return all(specs[t.node].inline and not specs[t.node].is_async for t in tasks)

    def _pumped(self, run: Run, feed: Feed, pairs: bool) -> Generator[Any, None, StepOutcome]:
        """Execute the step's tasks on a worker thread while handing the consumer what the
        feed receives meanwhile (as :meth:`drive` yields items); returns the step's
        outcome. Closed in the middle of the step, it lets the step finish and commits it
        first (see :meth:`drive`)."""
        stepping = worker_threads().submit(self.runner.run_step, run, run.tasks)
        stepping.add_done_callback(feed.signal)
        items = feed.items
        try:
            while True:
                while items:  # first what the step's start handed on, while it runs
                    item = items.popleft()
                    yield item if pairs else item[1]
                if stepping.done():
                    break
                feed.wait()
        except GeneratorExit:
            concurrent.futures.wait([stepping])
            self._close_in_step(run, stepping.result)
            raise
        return stepping.result()

    def _close_in_step(self, run: Run, stepping: Callable[[], StepOutcome]) -> None:
        """The consumer closed the stream while a step ran (or once it had read what the
        step's start handed on): as with ``cancel()``, that step commits (its effects
        happened), then the run is cancelled (or finished) there. ``stepping``: the step's
        outcome (its future's ``result``, or the step itself, to run)."""
        try:
            if self.complete(run, stepping()):
                self.closed(run)
        except Exception as exc:  # recorded as a driver would; the consumer has gone
            self.stopped_by(run, exc)

    async def _aclose_in_step(self, run: Run, stepping: asyncio.Future[StepOutcome]) -> None:
        """:meth:`_close_in_step` for the async driver, whose async routers run here. Only
        a cancelled task drops the step in flight (as in :meth:`adrive`)."""
        try:
            outcome = await asyncio.shield(stepping)
        except asyncio.CancelledError:
            stepping.cancel()
            run.step -= 1
            self.cancel_quietly(run, "its asyncio task was cancelled")
            raise
        except Exception as exc:
            self.stopped_by(run, exc)
            return
        try:
            routing = self.routing(run, outcome)
            if routing is not None:
                await routing
            if self.complete(run, outcome, merged=routing is not None):
                self.closed(run)
        except Exception as exc:  # recorded as a driver would; the consumer has gone
            self.stopped_by(run, exc)

    # One step loop, three drivers. ``advance`` is the loop itself: it yields the work to
    # do and is sent what came of it; the drivers - ``run_to_end`` (invoke, resume),
    # ``drive`` (streams, ``iter``) and ``adrive`` (the async API) - only do that work in
    # their way. Each checks ``run.cancelled`` nowhere itself: ``advance`` returns True at
    # the step boundary where a cancelled run stops, and the driver's way out (``_WayOut``)
    # stops it once the run has ended (cancelling is not a failure). Whatever else leaves a
    # driver goes through ``stopped_by``, unless the driver handled it itself.

    def advance(
        self, run: Run, *, fresh: bool, routers: bool = False, steps: bool = False
    ) -> Generator[Work, StepOutcome | None, bool]:
        """The run from its start to its end, as work for a driver: it yields the tasks of
        each step (send back their :class:`StepOutcome`), with ``routers`` the async routers
        about to route (a coroutine to await; send back ``None``), and with ``steps`` the
        number of each step committed (send back ``None``). Returns when the run finished or
        stopped at an interrupt (``False``) or was asked to stop at this step boundary
        (``True``)."""
        routers = routers and bool(self.plan.async_routers)  # no call a step without any
        if routers and fresh and (routing := self.routing(run)) is not None:
            yield routing
        self.begin(run, fresh)
        # No interrupt to stop at before a step: ``prepare`` without the call when nobody
        # listens for node_started either (the common case, paid once per step).
        interrupts, sited = self.plan.interrupts, self.plan.sited
        while run.tasks:
            if run.cancelled is not None:
                return True
            if interrupts or run.emit is not None:
                tasks = self.prepare(run)
                if tasks is None:
                    return False
            else:
                run.step += 1
                if run.step > run.max_steps:
                    run.check_step_limit()
                tasks = run.tasks
                if sited:
                    run.activate(tasks)
            outcome = yield tasks
            assert outcome is not None
            routing = self.routing(run, outcome) if routers else None
            if routing is not None:
                yield routing
            if not self.complete(run, outcome, merged=routing is not None):
                return False
            if steps:
                yield run.step
        self.finish(run)
        return False

    def stopped_by(self, run: Run, exc: BaseException) -> BaseException:
        """Record how ``exc``, leaving a driver, stopped ``run``; the error to raise (``exc``
        itself, or a typed error caused by it). A RunCancelledError met inside a step comes
        from a nested run; a BaseException (KeyboardInterrupt, SystemExit) stops the run at
        once, abandoning its lease."""
        instead: BaseException | None = None
        if isinstance(exc, RunCancelledError):
            if run.cancelled is None:  # only a nested run was asked to stop: its node failed
                self.fail(run, exc)
            else:
                instead = self._cancel_in_flight(run)
        elif isinstance(exc, StargraphError):
            self.fail(run, exc)
        elif isinstance(exc, Exception):
            instead = self._engine_failed(run, exc)
        else:
            self._abandon(run, exc)
        if instead is None:
            return exc
        instead.__cause__ = exc
        return instead

    def run_to_end(self, run: Run, *, fresh: bool) -> None:
        """Sync driver for invoke/resume: runs each step's tasks on this thread and the
        worker threads (see ``_tasks.execute_sync``)."""
        steps = self.advance(run, fresh=fresh)
        with _WayOut(self, run) as way_out:
            try:
                work = next(steps)
                while True:
                    if TYPE_CHECKING:  # only tasks: no routers nor step numbers were asked for
                        assert isinstance(work, Sequence)
                    work = steps.send(execute_sync(run, work, worker_threads, self.remote))
            except StopIteration as stop:
                way_out.cancelled = stop.value

    def drive(self, run: Run, *, fresh: bool) -> Generator[Any, None, None]:
        """Sync driver for streams and ``iter``. For a stream (a run with a feed) it is the
        stream itself, one generator between the consumer and the loop, as :meth:`adrive`
        is for ``astream``: it yields the feed's items (``(mode, item)`` pairs when several
        modes were asked for) after each committed step, before a step whose start handed
        the feed something (its ``node_started`` events, a values stream's first state),
        and whenever a live feed has something new while a step runs; then what is left
        once the run ended, also before the error that ended it is raised. For ``iter``
        (no feed) it yields the number of each committed step."""
        feed = run.feed
        items = None if feed is None else feed.items
        pairs = feed is not None and len(feed.modes) > 1
        # Only a live feed's nodes hand on items while they run: then the step's tasks run
        # on a worker thread, so that this one (the consumer's) hands them on. Every other
        # stream runs its steps as invoke does (see Handoff for events).
        steps = self.advance(run, fresh=fresh, steps=True)
        handoff: Handoff | None = None
        begun: Callable[[], StepOutcome] | None = None
        in_step = False
        try:
            with _WayOut(self, run) as way_out:
                try:
                    work = next(steps)
                    while True:
                        if type(work) is int:
                            if items is None:
                                yield work
                            while items:
                                item = items.popleft()
                                yield item if pairs else item[1]
                            work = steps.send(None)
                            continue
                        if TYPE_CHECKING:  # only tasks: no routers were asked for
                            assert isinstance(work, Sequence)
                        tasks = work
                        if feed is None:
                            work = steps.send(execute_sync(run, tasks, worker_threads, self.remote))
                        elif not feed.live and items and not self._all_inline(tasks):
                            # Hand on the step's start first; closed now, the step runs still.
                            # An events consumer reads that the nodes started: they may run
                            # while it is away (a worker takes the step over).
                            if feed.watched:
                                if handoff is None:
                                    handoff = Handoff(run, self.remote)
                                handoff.offer(tasks)
                                begun = handoff.take
                            else:
                                begun = partial(
                                    execute_sync, run, tasks, worker_threads, self.remote
                                )
                            while items:
                                item = items.popleft()
                                yield item if pairs else item[1]
                            outcome, begun = begun(), None
                            work = steps.send(outcome)
                        elif not feed.live or self._all_inline(tasks):
                            # Nothing to hand on while the tasks run, or inline ones (tiny pure
                            # functions): right here, as invoke runs them.
                            work = steps.send(execute_sync(run, tasks, worker_threads, self.remote))
                        else:
                            in_step = True
                            outcome = yield from self._pumped(run, feed, pairs)
                            in_step = False
                            work = steps.send(outcome)
                except StopIteration as stop:
                    way_out.cancelled = stop.value
                except GeneratorExit:
                    # The consumer closed the stream: at a step boundary, where it waits at
                    # the yield, or inside a step (then _pumped committed that step already),
                    # or once it read what the step's start handed on (then the step runs now).
                    way_out.handled = True
                    if begun is not None:
                        self._close_in_step(run, begun)
                    elif not in_step:
                        self.closed(run)
                    raise
        except StargraphError:
            # The consumer sees the failing step's events and run_failed before the error.
            while items:
                item = items.popleft()
                yield item if pairs else item[1]
            raise
        finally:
            if handoff is not None:
                handoff.close()
        while items:
            item = items.popleft()
            yield item if pairs else item[1]

    async def adrive(self, start: Callable[[], Run], *, fresh: bool) -> AsyncGenerator[Any, None]:
        """Async driver of the run ``start`` makes (called when the driver is first asked
        for an item: a stream does nothing until it is iterated, on the loop that iterates
        it). For ``astream`` (a run with a feed) it is the stream itself, one async
        generator between the consumer and the loop: it yields the feed's items (``(mode,
        item)`` pairs when several modes were asked for) after each committed step,
        before a step whose start handed the feed something, and whenever a live feed has
        something new while a step runs; then what is left once the run ended, also before
        the error that ended it is raised. For the async invoke and resume (no feed) it
        yields nothing. Async routers are awaited on this loop."""
        run = start()
        feed = run.feed
        items = None if feed is None else feed.items
        pairs = feed is not None and len(feed.modes) > 1
        stepping: asyncio.Future[StepOutcome] | None = None
        begun: Sequence[Task] | None = None
        advancing = self.advance(run, fresh=fresh, routers=True, steps=feed is not None)
        try:
            with _WayOut(self, run) as way_out:
                try:
                    work = next(advancing)
                    while True:
                        if type(work) is int:  # a committed step: hand on what it made
                            while items:
                                item = items.popleft()
                                yield item if pairs else item[1]
                            work = advancing.send(None)
                            continue
                        # Async routers: ``run.await_routers``, a native coroutine (an
                        # exact type check: isinstance of the ABC costs a step's share).
                        if type(work) is CoroutineType:
                            await work
                            work = advancing.send(None)
                            continue
                        if TYPE_CHECKING:  # typing.cast is a call a step
                            assert isinstance(work, Sequence)
                        tasks = work
                        if feed is None or not (feed.live or feed.watched):
                            if items:
                                begun = tasks  # its start was handed on: closed now, it runs
                                while items:
                                    item = items.popleft()
                                    yield item if pairs else item[1]
                                begun = None
                            outcome = self.runner.run_here(run, tasks)
                            if outcome is None:
                                outcome = await self.runner.arun_step(run, tasks)
                            work = advancing.send(outcome)
                        else:
                            stepping = asyncio.ensure_future(self.runner.arun_step(run, tasks))
                            stepping.add_done_callback(feed.signal)
                            while True:
                                while items:  # first what the step's start handed on
                                    item = items.popleft()
                                    yield item if pairs else item[1]
                                if stepping.done():
                                    break
                                await feed.await_wake()
                            outcome, stepping = stepping.result(), None
                            work = advancing.send(outcome)
                except StopIteration as stop:
                    way_out.cancelled = stop.value
                except GeneratorExit:
                    # The consumer closed the stream, as in ``drive``: inside a step, that
                    # step finishes and commits first.
                    way_out.handled = True
                    if begun is not None:
                        stepping = asyncio.ensure_future(self.runner.arun_step(run, begun))
                    if stepping is not None:
                        await self._aclose_in_step(run, stepping)
                    else:
                        self.closed(run)
                    raise
                except asyncio.CancelledError:
                    # The task was cancelled where it awaited, inside a step: that step is
                    # dropped.
                    way_out.handled = True
                    if stepping is not None:
                        stepping.cancel()
                    run.step -= 1
                    self.cancel_quietly(run, "its asyncio task was cancelled")
                    raise
        except StargraphError:
            # The consumer sees the failing step's events and run_failed before the error.
            while items:
                item = items.popleft()
                yield item if pairs else item[1]
            raise
        while items:
            item = items.popleft()
            yield item if pairs else item[1]

    def end(self, run: Run) -> None:
        """However a driver leaves: close the rule engines and the run's event loop,
        unregister the run."""
        if run.rules is not None:
            run.rules.close()
            run.rules = None
        if run.loop is not None:
            run.close_loop()
        ACTIVE.pop(run, None)

    def cancel(self, run: Run) -> RunCancelledError:
        """Stop the run at this step boundary: store it as cancelled; the error to raise."""
        reason = run.cancelled or "cancelled"
        if run.persistence is not None:
            run.persistence.cancel(run, reason)
        self.emit(run, RunCancelled, reason=reason)
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
        return self.cancel(run)

    def closed(self, run: Run) -> None:
        """The consumer closed the run's event stream at a step boundary: the run is
        cancelled there, or finished if that step was its last."""
        if run.tasks:
            self.cancel_quietly(run, "its event stream was closed")
            return
        try:
            self.finish(run)
        except Exception as exc:  # as in _cancel_quietly: nobody waits for this error
            _log.warning("run %r could not be marked done (%s)", run.run_id, exc)
            if run.persistence is not None:
                run.persistence.abandon()

    def cancel_quietly(self, run: Run, reason: str) -> None:
        """Cancel the run where nobody waits for the error (a closed stream, a cancelled
        task); a store that refuses is logged and the run abandoned instead."""
        run.cancelled = run.cancelled or reason
        try:
            self.cancel(run)
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

    def commit(
        self, run: Run, results: list[tuple[Task, dict[str, Any]]], *, merged: bool = False
    ) -> None:
        """Close the step whose tasks produced ``results``: merge the writes (unless
        ``merged``), schedule successors, apply the rules, emit the tasks' events, commit the
        step to the store, emit ``step_completed``."""
        ran = [results[0][0]] if len(results) == 1 else [task for task, _ in results]
        run.ran = ran
        if not merged:
            run.merge(results)
        run.schedule_next(ran)
        if run.rules is not None:
            self.apply_rules(run, ran)
        # A subgraph's runs share the parent's feed for their nodes' live items; their
        # updates and values are the parent's.
        feed = None if run.path else run.feed
        if run.emit is not None or (feed is not None and feed.updates):
            self._finished(run, results, feed)
        elif run.cache_hits:
            run.cache_hits.clear()
        if run.persistence is not None:
            # Nothing scheduled and no interrupt to stop at: the run finishes after this step,
            # and a store that can marks it done in the step's own transaction.
            last = not run.tasks and run.rule_interrupt is None
            run.persistence.commit(
                run,
                results,
                last=last,
                stopped_by=run.stopped_by,
                stop_reason=run.stop_reason,
                halted=run.halted,
            )
            run.committed()
        elif run.attempts:
            run.attempts = {}
        if run.emit is not None:
            tasks = run.tasks
            run.emit(
                step_completed(
                    run.run_id,
                    run.step,
                    run.path,
                    # A list made first: a generator costs a frame resumed per task.
                    (ran[0].node,) if len(ran) == 1 else tuple([t.node for t in ran]),
                    (tasks[0].node,) if len(tasks) == 1 else tuple([t.node for t in tasks]),
                )
            )
        if feed is not None and feed.values and _wrote(results):
            # As LangGraph's values stream: a step whose nodes wrote nothing (or only where
            # to go next) left the state as the last item showed it.
            feed.add("values", self.state(run))

    def _finished(
        self, run: Run, results: list[tuple[Task, dict[str, Any]]], feed: Feed | None
    ) -> None:
        """Hand on what each task of the step wrote, in task order: its ``node_finished``
        event (after its subgraph's events) and its ``updates`` item."""
        emit = run.emit
        updates = feed is not None and feed.updates
        run_id, step, path, attempts = run.run_id, run.step, run.path, run.attempts
        hits = run.cache_hits
        for task, writes in results if len(results) == 1 else sorted(results, key=by_task):
            written = jsonable(self.plan.channels, writes)
            hit = False
            if hits:
                hit = task.key in hits
                hits.discard(task.key)
            if emit is not None:
                if run.child_events:
                    for child_event in run.child_events.pop(task.key, ()):
                        emit(child_event)
                tries = attempts.get(f"{task.node}/{task.index}", 1) if attempts else 1
                emit(
                    node_finished(
                        run_id,
                        step,
                        path,
                        task.node,
                        task.index,
                        writes=written,
                        attempts=tries,
                        cached=hit,
                    )
                )
                if updates:
                    written = dict(written)  # the event's dict is its own
            if updates:
                assert feed is not None
                if GOTO_KEY in written:
                    # The event says what the record holds, routing included; an update
                    # (as LangGraph streams it) is the channels the node wrote.
                    written = {k: v for k, v in written.items() if k != GOTO_KEY}
                # A cached node's update is flagged as LangGraph flags it.
                feed.add(
                    "updates",
                    {task.node: written, "__metadata__": {"cached": True}}
                    if hit
                    else {task.node: written},
                )

    def apply_rules(self, run: Run, ran: Sequence[Task]) -> None:
        """Let the rules decide after the tasks ``ran``: a halt, a finish, an interrupt or a
        goto replaces what the edges scheduled in ``run.tasks``."""
        rules = run.rules
        assert rules is not None
        if not rules.applies(ran):
            return  # e.g. a ReAct act step: no engine watches it
        decision = rules.decide(run.step, [t.node for t in ran], run.values)
        if decision.kind == "continue":
            return
        run.decision = RuleDecision.model_validate(
            {
                "kind": decision.kind,
                "rule": decision.rule,
                "targets": tuple(decision.targets),
                "reason": decision.reason,
            }
        )
        self.emit(
            run,
            RuleDecided,
            decision=decision.kind,
            rule=decision.rule,
            target=",".join(decision.targets) or None,
            reason=decision.reason,
        )
        if decision.kind in ("halt", "finish"):
            run.tasks = ()
            run.stopped_by = decision.rule
            run.stop_reason = decision.reason
            run.halted = decision.kind == "halt"
        elif decision.kind == "interrupt":
            run.rule_interrupt = Interrupt(
                kind="rule", rule=decision.rule, reason=decision.reason, step=run.step
            )
        else:
            # goto replaces whatever the edges scheduled, Sends included.
            run.tasks = tuple(
                self.plan.single_tasks[t][0] for t in sorted(set(decision.targets)) if t != END
            )

    def finish(self, run: Run) -> None:
        """The run has nothing scheduled: mark it done (or halted, when a halt rule stopped
        it) and emit ``run_finished``."""
        if run.persistence is not None:
            run.persistence.finish(
                run, stopped_by=run.stopped_by, stop_reason=run.stop_reason, halted=run.halted
            )
        if run.emit is not None:  # the event dumps the whole state: only build it when seen
            self.emit(
                run,
                RunFinished,
                state=jsonable(self.plan.channels, run.values),
                stopped_by=run.stopped_by,
                status="halted" if run.halted else "done",
                stop_reason=run.stop_reason,
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
        self.fail(run, error)
        return error

    def fail(self, run: Run, exc: StargraphError) -> None:
        """The run failed with ``exc``: mark it failed (or let its lease go when the store
        itself refused) and emit ``run_failed``."""
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
        self.emit(
            run,
            RunFailed,
            node=getattr(exc, "node", None),
            error=str(exc),
            error_type=type(exc).__name__,
        )

    def emit_started(self, run: Run, tasks: Sequence[Task]) -> None:
        """Emit ``node_started`` for each of ``tasks`` (the step about to run)."""
        emit = run.emit
        if emit is not None:
            run_id, step, path = run.run_id, run.step, run.path
            for task in tasks:
                emit(node_started(run_id, step, path, task.node, task.index))

    # ------------------------------------------------------------------ live streams

    def live(
        self,
        make_run: Callable[[Callable[[Event], None] | None], Run],
        modes: tuple[str, ...],
        *,
        fresh: bool,
    ) -> Iterator[Any]:
        """Stream the run ``make_run`` builds (given its emit function) in ``modes``, with
        the sync driver."""
        feed = Feed(modes)
        run = make_run(self.feeder(feed))
        run.feed = feed
        return self.drive(run, fresh=fresh)

    @staticmethod
    def items(feed: Feed, modes: tuple[str, ...]) -> list[Any]:
        """What the consumer gets of the feed's items: items of one mode, else pairs."""
        items = feed.drain()
        if len(modes) == 1:
            return [item for _, item in items]
        return items

    def feeder(self, feed: Feed) -> Callable[[Event], None] | None:
        """The emit function of a streamed run: its events into the feed when they are
        asked for, else ``None`` (the other modes' items are made at the step boundaries
        from what the step committed, so nobody builds events nobody reads)."""
        # The run adds the on_event observer (see observed).
        return feed.event if feed.watched else None


class _WayOut:
    """How a driver leaves its run, the same for the three of them: what escapes the
    driver's loop goes through :meth:`StepLoop.stopped_by`, unless the driver handled it
    itself first and set ``handled`` (a closed stream, a cancelled task); the run ends
    (:meth:`StepLoop.end`) however the driver leaves; and a run that ``advance`` stopped at
    a step boundary (the driver sets ``cancelled``) is then cancelled there. One per run."""

    __slots__ = ("cancelled", "handled", "loop", "run")

    def __init__(self, loop: StepLoop, run: Run) -> None:
        self.loop = loop
        self.run = run
        self.cancelled = False
        self.handled = False

    def __enter__(self) -> _WayOut:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            if exc is not None and not self.handled:
                raise self.loop.stopped_by(self.run, exc)
        finally:
            self.loop.end(self.run)
        if self.cancelled:
            raise self.loop.cancel(self.run)


def _wrote(results: list[tuple[Task, dict[str, Any]]]) -> bool:
    """Whether a step's tasks wrote any channel (routing alone is not a write)."""
    # Loops, not a generator: a values stream asks once a step.
    for _, writes in results:
        for key in writes:
            if key not in ROUTING_KEYS:
                return True
    return False
