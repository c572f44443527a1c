"""``CompiledGraph``: run, stream, resume, fork and inspect runs of a compiled graph.

The facade over the runtime's layers: the frozen :class:`~stargraph.runtime._plan.Plan`
(what runs), the :class:`~stargraph.runtime._steploop.StepLoop` (how a run goes from step
to step, and its drivers), stored runs (``_stored``: load, fork, migrate, child runs),
replay (``_replay``) and threads (``_threads``). Each method here checks its arguments and
delegates; none of those modules imports this one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel

from stargraph.checkpoint import CheckpointStore, Recording, RunRecord, StepRecord
from stargraph.checkpoint._compact import expand_steps
from stargraph.errors import CheckpointError, InvalidInputError, ReplayError, StargraphError
from stargraph.runtime._cancel import request
from stargraph.runtime._durable import Durability, atake_lease, check_run_id, load_values
from stargraph.runtime._events import Event
from stargraph.runtime._interrupts import mark_interrupted
from stargraph.runtime._plan import Command, Plan, unmet_error
from stargraph.runtime._remote import Remote
from stargraph.runtime._replay import ReplayDriver
from stargraph.runtime._replayplan import ReplayPlan, StubOption, as_stub, warn_reruns
from stargraph.runtime._run import MAX_STEPS_BOUND, Run, refuse_unknown_keys
from stargraph.runtime._schemas import graph_output
from stargraph.runtime._settings import DEFAULT_MAX_STEPS, RunSettings
from stargraph.runtime._steploop import StepLoop
from stargraph.runtime._stored import NO_RESPONSE, Migration, load, require_store
from stargraph.runtime._stored import fork as fork_run
from stargraph.runtime._stored import fork_next as preview_fork
from stargraph.runtime._stored import run_nested as run_child
from stargraph.runtime._stream import Feed, StreamMode, Superstep, stream_modes
from stargraph.runtime._threads import get_thread as thread_runs
from stargraph.runtime._threads import list_threads
from stargraph.runtime._values import state_of
from stargraph.runtime._versions import InputsPolicy, ReplayReport, region_hashes, replay_across

if TYPE_CHECKING:
    from stargraph.checkpoint._lease import Lease

__all__ = ["DEFAULT_MAX_STEPS", "MAX_STEPS_BOUND", "CompiledGraph"]

StateT = TypeVar("StateT", bound=BaseModel)

_DEFAULTS = RunSettings()


class CompiledGraph(Generic[StateT]):
    """A validated graph, ready to run. Build it with ``Graph.compile()``.

    ``invoke`` / ``ainvoke`` return the final state; ``stream`` / ``astream`` yield typed
    events. With a ``store``, every step is checkpointed and ``resume``, ``fork``,
    ``history`` and ``get_state`` work on stored runs. ``graph_hash`` identifies exactly the
    behaviour being run.
    """

    def __init__(
        self,
        plan: Plan,
        options: RunSettings = _DEFAULTS,
        *,
        on_event: Callable[[Event], None] | None = None,
        executor: concurrent.futures.Executor | None = None,
        rebuild: Callable[[CheckpointStore | None, int], CompiledGraph[StateT]] | None = None,
    ) -> None:
        """Run ``plan`` (built by the compiler) with ``options`` (the ``RunOptions`` it was
        compiled with); see ``stargraph.compile.compile_ir`` for what each does.
        ``rebuild(store, max_steps)`` compiles the same graph again with the same options
        but those two (the compiler passes it; see :meth:`with_store`)."""
        self.plan = plan
        # compile(executor=...): where blocking branch work runs (see runtime._remote). The
        # graph does not own it: close() leaves it running.
        self.executor = executor
        self.remote = None if executor is None else Remote(executor, plan.specs, plan.ir.state.ref)
        self.steploop = StepLoop(plan, options, on_event=on_event, remote=self.remote)
        # The plan's parts and the options, as attributes.
        self.ir = plan.ir
        self.state_model: type[StateT] = plan.state_model  # type: ignore[assignment]
        self.channels = plan.channels
        self.specs = plan.specs
        self.start_routers = plan.start_routers
        self.rules = plan.rules
        self.services = plan.services
        self.bindable = plan.bindable
        self.on_event = on_event
        self.max_steps = options.max_steps
        self.store = options.store
        self.durability: Durability = options.durability
        self.snapshot_every = options.snapshot_every
        self.on_code_change = options.on_code_change
        self._rebuild = rebuild

    @property
    def observer_failures(self) -> int:
        """How many times the ``on_event`` observer (a plugin hook) raised. A failing
        observer never stops a run: each failure is logged on the ``stargraph`` logger and
        counted here, and the run goes on."""
        return self.steploop.observer_failures

    @property
    def graph_hash(self) -> str:
        """``"sha256:<hex>"`` of the behavioural content of the graph."""
        return self.plan.graph_hash

    @cached_property
    def code_hash(self) -> str:
        """``"sha256:<hex>"`` of the source of every node and router (stored with runs)."""
        return self.plan.code_hash

    # ------------------------------------------------------------------ running

    def invoke(
        self,
        input: Mapping[str, Any] | StateT | Command | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> StateT:
        """Run to the end (or to an interrupt) and return the state reached.

        With ``thread_id`` the run is the next turn of that thread: it starts from the state
        the thread's last turn finished with, ``input`` applied through the reducers (see
        ``runtime._threads``; needs a store).

        ``Command(resume=answer)`` as ``input`` answers the interrupt that run ``run_id`` (or
        the last turn of thread ``thread_id``) waits on: it is ``resume(that_run,
        response=answer)``, ``answer`` a mapping from interrupt id to answer when several
        wait."""
        if isinstance(input, Command):
            rid = self._resumed(input, run_id, thread_id)
            return self.resume(rid, response=input.resume, max_steps=max_steps)
        refuse_unknown_keys(self.state_model, input, run_id)
        run = self.steploop.new_run(input, run_id, max_steps, emit=None, thread_id=thread_id)
        self.steploop.run_to_end(run, fresh=True)
        return self._result(run)

    def _resumed(self, command: Command, run_id: str | None, thread_id: str | None) -> str:
        """The interrupted run a ``Command(resume=...)`` input continues."""
        if command.resume is None or command.update is not None or command.goto or command.graph:
            raise InvalidInputError(
                f"a Command given as input only resumes an interrupted run, but got {command!r}; "
                "pass Command(resume=answer) with run_id= or thread_id= (to write channels "
                "first, call resume(run_id, update=...) at a breakpoint)",
                run_id=run_id,
            )
        if run_id is not None:
            return run_id
        if thread_id is None:
            raise InvalidInputError(
                "Command(resume=...) as input needs the run it answers: pass run_id= (the "
                "interrupted run) or thread_id= (its thread's last turn)"
            )
        return thread_runs(self.store, thread_id)[-1].run_id

    @overload
    def stream(
        self,
        input: Mapping[str, Any] | StateT | Command | None = None,
        *,
        mode: Literal["events"] = "events",
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> Generator[Event, None, None]: ...

    @overload
    def stream(
        self,
        input: Mapping[str, Any] | StateT | Command | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode],
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> Generator[Any, None, None]: ...

    def stream(
        self,
        input: Mapping[str, Any] | StateT | Command | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode] = "events",
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> Generator[Any, None, None]:
        """Run to the end, yielding what happens as it happens.

        ``mode`` picks what: ``"events"`` (the typed run events; the default), ``"updates"``
        (``{node: writes}`` for each finished node), ``"values"`` (the state after each
        step), ``"custom"`` (a :class:`~stargraph.runtime.CustomEvent` per ``ctx.emit``) or
        ``"messages"`` (a :class:`~stargraph.runtime.MessageChunk` per piece of a model's
        answer). With a list of modes, items come as ``(mode, item)`` pairs. A run that
        stops at an interrupt ends its ``updates`` and ``values`` items with
        ``{"__interrupt__": (Interrupt(...),)}``. A consumer that stops reading
        (``close()``, or leaving a ``for`` loop over the stream) cancels the run at the step
        it reached: closed inside a step, that step finishes and commits first (its nodes
        ran), then the run ends ``cancelled`` at it, or ``done`` if it was the last;
        ``resume(run_id)`` continues with the next step. ``thread_id``: as in
        :meth:`invoke`.
        """
        modes = stream_modes(mode)
        if isinstance(input, Command):
            rid = self._resumed(input, run_id, thread_id)
            yield from self.resume_stream(
                rid, response=input.resume, max_steps=max_steps, mode=mode
            )
            return
        refuse_unknown_keys(self.state_model, input, run_id)
        yield from self.steploop.live(
            lambda emit: self.steploop.new_run(
                input, run_id, max_steps, emit=emit, thread_id=thread_id
            ),
            modes,
            fresh=True,
        )

    async def ainvoke(
        self,
        input: Mapping[str, Any] | StateT | Command | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> StateT:
        """Async :meth:`invoke`: async nodes of one step run concurrently on this loop
        (``Command(resume=...)`` as ``input``: :meth:`aresume`)."""
        if isinstance(input, Command):
            rid = self._resumed(input, run_id, thread_id)
            return await self.aresume(rid, response=input.resume, max_steps=max_steps)
        refuse_unknown_keys(self.state_model, input, run_id)
        run = self.steploop.new_run(input, run_id, max_steps, emit=None, thread_id=thread_id)
        async for _ in self.steploop.adrive(lambda: run, fresh=True):
            pass
        return self._result(run)

    @overload
    def astream(
        self,
        input: Mapping[str, Any] | StateT | Command | None = None,
        *,
        mode: Literal["events"] = "events",
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> AsyncIterator[Event]: ...

    @overload
    def astream(
        self,
        input: Mapping[str, Any] | StateT | Command | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode],
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> AsyncIterator[Any]: ...

    def astream(
        self,
        input: Mapping[str, Any] | StateT | Command | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode] = "events",
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> AsyncIterator[Any]:
        """Async :meth:`stream` (same modes). ``await stream.aclose()`` inside a step lets
        that step finish and commit, then cancels the run there, as closing a stream does;
        only cancelling the task that iterates drops the step in flight.
        ``Command(resume=...)`` as ``input`` continues the interrupted run, as in
        :meth:`invoke`."""
        command = input if isinstance(input, Command) else None

        def start() -> Run:
            # When the stream is first iterated, on the loop that iterates it.
            modes = stream_modes(mode)
            if command is None:
                refuse_unknown_keys(self.state_model, input, run_id)
            feed = Feed(modes)
            if feed.live or feed.watched:  # its steps run as tasks whose ends wake the driver
                feed.loop = asyncio.get_running_loop()
                feed.awake = asyncio.Event()
            emit = self.steploop.feeder(feed)
            if command is not None:
                rid = self._resumed(command, run_id, thread_id)
                run = self._load(rid, command.resume, None, max_steps, None, emit=emit)
            else:
                assert not isinstance(input, Command)
                run = self.steploop.new_run(
                    input, run_id, max_steps, emit=emit, thread_id=thread_id
                )
            run.feed = feed
            return run

        return self.steploop.adrive(start, fresh=command is None)

    def iter(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        thread_id: str | None = None,
    ) -> Generator[Superstep, None, None]:
        """Run one superstep at a time: yields a :class:`~stargraph.runtime.Superstep` (what
        ran, what runs next, the state) after each committed step. The next step starts
        only when the next one is asked for; closing the iterator (or leaving the ``for``)
        between steps cancels the run there, as closing a stream does. ``thread_id``: as in
        :meth:`invoke`."""
        refuse_unknown_keys(self.state_model, input, run_id)
        run = self.steploop.new_run(input, run_id, max_steps, emit=None, thread_id=thread_id)
        drive = self.steploop.drive(run, fresh=True)
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

    @overload
    def replay(
        self,
        source: str | Recording,
        *,
        until_step: int | None = None,
        from_step: int | None = None,
        mutate: Mapping[str, Any] | None = None,
        new_run_id: str | None = None,
        stub: StubOption | None = None,
        graph: None = None,
    ) -> StateT: ...

    @overload
    def replay(
        self,
        source: str | Recording,
        *,
        graph: CompiledGraph[Any],
        live: bool = False,
        on_inputs: InputsPolicy = "run",
    ) -> ReplayReport: ...

    def replay(
        self,
        source: str | Recording,
        *,
        until_step: int | None = None,
        from_step: int | None = None,
        mutate: Mapping[str, Any] | None = None,
        new_run_id: str | None = None,
        stub: StubOption | None = None,
        graph: CompiledGraph[Any] | None = None,
        live: bool = False,
        on_inputs: InputsPolicy = "run",
    ) -> StateT | ReplayReport:
        """Replay a recorded run (a run id in this graph's store, or a :class:`Recording`
        such as a loaded cassette) offline and return its final state.

        Nothing is written and no model is called nor tool run: their calls, and
        ``ctx.once``, are served from the record; see ``runtime._replay``. ``stub``: which
        nodes are served their recorded writes instead of running - ``"must"`` (the
        ``must_stub`` ones; every other node's body runs again and must write what it
        wrote), ``"all"`` (no node body runs; routing, rules and reducers are checked
        against the record) or node names (besides the ``must_stub`` ones). Left unset it
        is ``"must"``, with a :class:`~stargraph.errors.ReplayEffectsWarning` naming the
        nodes that run again (:meth:`replay_plan`). ``until_step`` stops early.

        With ``from_step=k`` this is a *counterfactual*: steps before ``k`` come from the
        record, ``mutate`` (state overrides) is applied, and the run continues live from
        ``k`` as a new run linked to its parent (``new_run_id``).

        With ``graph=other`` (another version of this graph) the run is replayed against
        ``other`` region by region and a :class:`~stargraph.replay.ReplayReport` is
        returned: tasks of unchanged regions that see their recorded input are served from
        the record (their bodies do not run); changed and new regions run their new code,
        with ``other``'s services when ``live=True``, else a call they make is a
        :class:`~stargraph.errors.ReplayDivergenceError` naming the region; an unchanged
        region whose input changed upstream runs (``on_inputs="run"``) or stops the replay
        (``"stop"``). The recording graph's regions are this graph's, or those a cassette
        carries (``export_cassette(..., graph=app)``). See ``runtime._versions``.
        """
        if graph is not None:
            if until_step is not None or from_step is not None or stub is not None:
                raise ReplayError(
                    "replay(graph=) replays the whole run against another graph version; "
                    "until_step=, from_step= and stub= belong to a replay by this graph alone"
                )
            recording = self._recording(source)
            return replay_across(
                graph.steploop,
                recording,
                self._recorded_regions(recording),
                live=live,
                on_inputs=on_inputs,
                children=None if isinstance(source, Recording) else self._stored_child,
            )
        if from_step is not None:
            if not isinstance(source, str):
                raise ReplayError("a counterfactual needs a run id in this graph's store")
            if stub is not None:
                raise ReplayError(
                    "replay(from_step=, stub=): a counterfactual runs live from its step, so "
                    "there is nothing to stub; drop stub= or from_step="
                )
            fork_id = self.fork(source, from_step - 1, update=mutate, new_run_id=new_run_id)
            return self.resume(fork_id)
        driver = self._replay_driver(source, until_step, stub, None)
        for _ in driver.steps_run():
            pass
        return self._state(driver.run)

    @overload
    def replay_stream(
        self,
        source: str | Recording,
        *,
        until_step: int | None = None,
        stub: StubOption | None = None,
        mode: Literal["events"] = "events",
    ) -> Generator[Event, None, None]: ...

    @overload
    def replay_stream(
        self,
        source: str | Recording,
        *,
        until_step: int | None = None,
        stub: StubOption | None = None,
        mode: StreamMode | Sequence[StreamMode],
    ) -> Generator[Any, None, None]: ...

    def replay_stream(
        self,
        source: str | Recording,
        *,
        until_step: int | None = None,
        stub: StubOption | None = None,
        mode: StreamMode | Sequence[StreamMode] = "events",
    ) -> Generator[Any, None, None]:
        """:meth:`replay`, yielding what the replayed run makes in the modes of
        :meth:`stream` (``events`` by default, identical to the live ones; ``updates``,
        ``values``, ``custom``, ``messages``; several as ``(mode, item)`` pairs)."""
        modes = stream_modes(mode)
        feed = Feed(modes)
        driver = self._replay_driver(source, until_step, stub, self.steploop.feeder(feed))
        driver.run.feed = feed
        items = self.steploop.items
        try:
            for _ in driver.steps_run():
                yield from items(feed, modes)
        except StargraphError:
            yield from items(feed, modes)
            raise
        yield from items(feed, modes)

    def replay_plan(
        self,
        source: str | Recording,
        *,
        until_step: int | None = None,
        stub: StubOption | None = None,
    ) -> ReplayPlan:
        """What :meth:`replay` with the same arguments would re-execute: the recorded nodes
        whose bodies run again (``reruns``, with unjournaled effects such as files written)
        and those served their recorded writes (``served``). Nothing runs."""
        recording = self._recording(source)
        driver = ReplayDriver(
            self.steploop, recording, until_step=until_step, stub=as_stub(stub, self.plan)
        )
        return driver.plan()

    def _replay_driver(
        self,
        source: str | Recording,
        until_step: int | None,
        stub: StubOption | None,
        emit: Callable[[Event], None] | None,
    ) -> ReplayDriver:
        driver = ReplayDriver(
            self.steploop,
            self._recording(source),
            until_step=until_step,
            emit=emit,
            stub=as_stub(stub, self.plan),
        )
        if stub is None:
            # Left to the default, the caller has not said whether node bodies may run
            # again: say which will, before any does (once, for the run and its children).
            warn_reruns(driver.plan(), stacklevel=3)
        return driver

    def get_thread(self, thread_id: str) -> list[RunRecord]:
        """The runs of a thread, one per turn, in turn order; the last one's final state is
        the conversation so far (``get_state(runs[-1].run_id)``). Raises
        :class:`~stargraph.errors.ThreadNotFoundError` for a thread with no run."""
        return thread_runs(self.store, thread_id)

    def threads(self, *, limit: int = 100) -> list[RunRecord]:
        """The latest turn of each thread in the store, newest first."""
        return list_threads(self.store, limit)

    def _recorded_regions(self, recording: Recording) -> dict[str, str]:
        """The region hashes of the graph that made ``recording``: those its cassette
        carries, else this graph's when it made it."""
        carried: dict[str, str] | None = getattr(recording, "regions", None)
        if carried:
            return dict(carried)
        if recording.run.graph_hash != self.graph_hash:
            raise ReplayError(
                f"run {recording.run.run_id!r} was recorded by graph "
                f"{recording.run.graph_hash}, not by this graph {self.graph_hash}, and its "
                "recording carries no region hashes; call replay(..., graph=new) on the graph "
                "that recorded it, or export the cassette with export_cassette(..., graph=app)",
                run_id=recording.run.run_id,
            )
        return region_hashes(self.plan)

    def _stored_child(self, run_id: str) -> Recording | None:
        """The recording of child run ``run_id`` in this graph's store, if it holds one."""
        store = require_store(self.steploop)
        try:
            store.get_run(run_id)
        except LookupError:
            return None
        return Recording.from_store(store, run_id)

    def _recording(self, source: str | Recording) -> Recording:
        if isinstance(source, Recording):
            return source
        return Recording.from_store(require_store(self.steploop), source)

    def resume(
        self,
        run_id: str,
        *,
        response: Any = NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        migration: Migration | None = None,
        wait: bool | float = False,
        as_node: str | None = None,
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

        ``as_node`` routes the update as if that node had written it: its edges, routers
        (``Send``s included) and rules choose the next tasks from the updated state, as
        :meth:`fork` does; without it the run keeps the tasks it had scheduled.
        """
        run = self._load(run_id, response, update, max_steps, migration, wait=wait, as_node=as_node)
        self.steploop.run_to_end(run, fresh=False)
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
        as_node: str | None = None,
        mode: Literal["events"] = "events",
    ) -> Generator[Event, None, None]: ...

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
        as_node: str | None = None,
        mode: StreamMode | Sequence[StreamMode],
    ) -> Generator[Any, None, None]: ...

    def resume_stream(
        self,
        run_id: str,
        *,
        response: Any = NO_RESPONSE,
        update: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        migration: Migration | None = None,
        wait: bool | float = False,
        as_node: str | None = None,
        mode: StreamMode | Sequence[StreamMode] = "events",
    ) -> Generator[Any, None, None]:
        """:meth:`resume`, yielding what happens as it happens, in the stream ``mode`` of
        ``stream`` (typed events by default; ``"messages"`` for model tokens)."""
        modes = stream_modes(mode)
        yield from self.steploop.live(
            lambda emit: self._load(
                run_id,
                response,
                update,
                max_steps,
                migration,
                emit=emit,
                wait=wait,
                as_node=as_node,
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
        as_node: str | None = None,
    ) -> StateT:
        """Async :meth:`resume`; with ``wait``, waiting for another owner to let go sleeps on
        the event loop (other tasks run meanwhile)."""
        store = require_store(self.steploop)
        check_run_id(run_id)
        self._refuse_unmet()  # before the lease: a refused resume holds nothing
        taken = await atake_lease(store, run_id, wait=wait)
        run = self._load(
            run_id, response, update, max_steps, migration, taken=taken, as_node=as_node
        )
        async for _ in self.steploop.adrive(lambda: run, fresh=False):
            pass
        return self._result(run)

    def _load(
        self,
        run_id: str,
        response: Any,
        update: Mapping[str, Any] | None,
        max_steps: int | None,
        migration: Migration | None,
        *,
        emit: Callable[[Event], None] | None = None,
        wait: bool | float = False,
        taken: tuple[Lease, RunRecord] | None = None,
        as_node: str | None = None,
    ) -> Run:
        # The stored run, leased and ready to continue: _stored.load with this graph's loop
        # and code hash (the arguments are resume's; ``taken``: a lease aresume took).
        if taken is None:
            self._refuse_unmet()
        return load(
            self.steploop,
            run_id,
            response=response,
            update=update,
            max_steps=max_steps,
            emit=emit,
            migration=migration,
            wait=wait,
            taken=taken,
            code_hash=self.code_hash,
            as_node=as_node,
        )

    def _refuse_unmet(self) -> None:
        # A run continued live needs the services its mounted skills require.
        if self.plan.unmet_requires:
            raise unmet_error(self.plan.unmet_requires)

    def get_run(self, run_id: str) -> RunRecord:
        """The stored record of a run (status, last step, interrupt, error)."""
        return require_store(self.steploop).get_run(run_id)

    def list_runs(self, *, status: Any = None, limit: int = 100) -> list[RunRecord]:
        """Stored runs, newest first."""
        return require_store(self.steploop).list_runs(status=status, limit=limit)

    def history(self, run_id: str) -> list[StepRecord]:
        """Every committed step of a run, in order (step 0 is the input), with its recorded
        model requests whole."""
        return expand_steps(require_store(self.steploop).get_steps(run_id), {})

    def get_state(self, run_id: str, step: int | None = None) -> StateT:
        """The state of a stored run after ``step`` (default: its last committed step)."""
        store = require_store(self.steploop)
        last = store.get_run(run_id).last_step
        if step is not None and not 0 <= step <= last:
            raise CheckpointError(
                f"run {run_id!r} has steps 0..{last}; step {step} does not exist",
                run_id=run_id,
                step=step,
            )
        at = last if step is None else step
        values, _ = load_values(store, self.channels, run_id, at)
        return state_of(self.state_model, values, run_id, at)

    def fork(
        self,
        run_id: str,
        step: int,
        *,
        update: Mapping[str, Any] | None = None,
        new_run_id: str | None = None,
        as_node: str | None = None,
    ) -> str:
        """Start a new run from ``step`` of ``run_id`` (optionally with changed channels).

        The fork holds a copy of the parent's steps ``0..step`` (same step ids, same recorded
        calls, so it replays like the parent up to there); ``update`` becomes step
        ``step + 1``, written by ``__update__``. It is linked to its parent
        (``parent_run_id``/``parent_step``) and ``pending`` until ``resume(new_run_id)``
        starts it. Returns the new run id.

        Without ``as_node`` the fork keeps the tasks the parent had scheduled after
        ``step``: an edit of a field a router reads does not change where the run goes.
        ``as_node="classify"`` applies ``update`` as if node ``classify`` had written it
        (through the reducers) and schedules the next tasks from the edited state by that
        node's edges, routers (``Send``s included), joins and rules, as LangGraph's
        ``update_state(..., as_node=)`` does. Any node of the graph may be named, whether
        or not it ran before ``step``; a name the graph lacks raises
        :class:`~stargraph.errors.InvalidInputError` listing its nodes. The update step
        records ``as_node`` (``StepRecord.as_node``); when that node's rules end the run at
        the update (a ``halt`` or a ``finish``), the fork is ``halted`` or ``done`` instead of
        ``pending``.
        """
        return fork_run(
            self.steploop,
            run_id,
            step,
            update=update,
            new_run_id=new_run_id,
            code_hash=self.code_hash,
            as_node=as_node,
        )

    def fork_next(
        self,
        run_id: str,
        step: int,
        *,
        update: Mapping[str, Any] | None = None,
        as_node: str | None = None,
    ) -> tuple[str, ...]:
        """The nodes ``fork(run_id, step, update=, as_node=)`` would schedule for its next
        step (a node once per task, so a ``Send`` fan-out repeats it), without forking.

        Nothing is written: the console's fork form shows this before you confirm. Without
        ``as_node`` it is what the parent had scheduled after ``step``.
        """
        return preview_fork(
            self.steploop,
            run_id,
            step,
            update=update,
            as_node=as_node,
            code_hash=self.code_hash,
        )

    def run_nested(
        self,
        input: Mapping[str, Any],
        *,
        run_id: str,
        path: tuple[str, ...],
        emit: Callable[[Event], None] | None,
        parent: Any,
    ) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        """Run this graph as the child of a subgraph node (see ``_stored.run_nested``)."""
        return run_child(
            self.steploop,
            input,
            run_id=run_id,
            path=path,
            emit=emit,
            parent=parent,
            code_hash=self.code_hash,
        )

    def with_store(
        self, store: CheckpointStore | None, *, max_steps: int | None = None
    ) -> CompiledGraph[StateT]:
        """This graph compiled again to keep its runs in ``store`` (``None``: nowhere), and
        to stop after ``max_steps`` if given; every other option it was compiled with stays
        (services, plugins, entropy, durability, snapshots, the executor, nesting), and its
        embedded subgraphs keep their child runs in ``store`` too. The graph hash is the
        same, so a run one stored, the other resumes. This graph is left as it was::

            app = graph.compile(services={"model": model}, plugins=pm)
            durable = app.with_store(SqliteStore("runs.db"))
        """
        if self._rebuild is None:
            raise StargraphError(
                f"{self!r} was not made by Graph.compile() or compile_ir(), so it cannot be "
                "compiled again; compile the graph with store=... instead"
            )
        return self._rebuild(store, self.max_steps if max_steps is None else max_steps)

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
        :func:`~stargraph.runtime.cancel_on_signals`); an interrupted or failed run needs no
        cancelling. Safe to call from any thread.
        """
        return request(self.plan, run_id, reason)

    def _result(self, run: Run) -> StateT:
        # What invoke/resume return: the state, marked when the run stopped at an interrupt.
        state = self._state(run)
        if self.plan.output_model is not None or self.plan.private:  # Graph(..., output=)
            state = graph_output(state, self.plan.output_model, self.plan.private)  # type: ignore[assignment]
        if run.interrupt is not None:
            mark_interrupted(state, run.interrupt.model_copy(update={"run_id": run.run_id}))
        return state

    def _state(self, run: Run) -> StateT:
        return state_of(self.state_model, run.values, run.run_id, run.step)

    def close(self) -> None:
        """Kept for compatibility: the worker threads are shared by every compiled graph of
        the process and idle between steps, so a graph holds nothing to release (it stays
        usable either way)."""

    def __repr__(self) -> str:
        return f"CompiledGraph({self.ir.name!r}, {self.graph_hash})"
