"""One run's progress: channel values, step counter, scheduled tasks, joins.

``Run`` is the step machine shared by the sync and async drivers in ``_executor``: it
schedules tasks, validates what they write, and merges writes in ``(node, index)`` order
through the channels' reducers (invariant 2). It never executes a node itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from stargraph._typed import validate_raw
from stargraph.errors import (
    InvalidInputError,
    InvalidPayloadError,
    InvalidWriteError,
    MissingServiceError,
    NodeError,
    RunError,
    StargraphError,
    StepLimitExceeded,
)
from stargraph.ir import END
from stargraph.runtime._commands import commanded, take_gotos
from stargraph.runtime._context import (
    AttemptFence,
    Conversations,
    Entropy,
    RunContext,
    ServiceMap,
    TaskJournal,
)
from stargraph.runtime._events import Event
from stargraph.runtime._inputs import node_input
from stargraph.runtime._loop import RunLoop
from stargraph.runtime._plan import (
    ChildRunId,
    Command,
    NodeSpec,
    Plan,
    RouterSpec,
    Send,
    Task,
    by_task,
)
from stargraph.runtime._values import (
    describe_exception,
    describe_validation,
    jsonable,
    reduce_writes,
)
from stargraph.state import fast_state

if TYPE_CHECKING:
    from stargraph.checkpoint import JournalEntry, StepRecord
    from stargraph.errors import _RunAt
    from stargraph.runtime._durable import Persistence
    from stargraph.runtime._interrupts import Interrupt, RuleDecision
    from stargraph.runtime._recorded import ReplaySource
    from stargraph.runtime._rules import RuleSet
    from stargraph.runtime._stream import Feed

__all__ = [
    "MAX_STEPS_BOUND",
    "Run",
    "describe_exception",
    "initial_values",
    "jsonable",
    "make_tasks",
    "max_steps_problem",
    "refuse_unknown_keys",
]

MAX_STEPS_BOUND = 2**53 - 1
"""The largest ``max_steps`` accepted: step numbers are JSON numbers in records and events,
exact only up to 2**53 - 1."""


def max_steps_problem(value: object) -> str | None:
    """Why ``value`` cannot be a step limit (``None`` when it can): an ``int`` (not a
    ``bool``) from 1 to :data:`MAX_STEPS_BOUND`."""
    if type(value) is int and 1 <= value <= MAX_STEPS_BOUND:
        return None
    if type(value) is int and value > MAX_STEPS_BOUND:
        shown = f"a {value.bit_length()}-bit int" if value > 10**30 else str(value)
    else:
        shown = f"{value!r} ({type(value).__name__})"
    return (
        f"max_steps={shown} is not a valid step limit; it must be an int from 1 to "
        f"{MAX_STEPS_BOUND} (2**53 - 1)"
    )


class Run:
    """One run's mutable progress: channel values, step counter, pending tasks, joins."""

    __slots__ = (
        "activations",
        "attempts",
        "cache_hits",
        "cancelled",
        "child_events",
        "collect",
        "conversations",
        "decision",
        "done",
        "emit",
        "entropy",
        "feed",
        "gotos",
        "halted",
        "interrupt",
        "joins_seen",
        "journals",
        "loop",
        "max_steps",
        "path",
        "persistence",
        "plan",
        "ran",
        "replay",
        "replay_calls",
        "routed",
        "rule_interrupt",
        "rules",
        "run_id",
        "skip_interrupt_before",
        "step",
        "stop_reason",
        "stopped_by",
        "tasks",
        "thread",
        "to_parent",
        "values",
        "view",
    )

    def __init__(
        self,
        plan: Plan,
        run_id: str,
        values: dict[str, Any],
        *,
        max_steps: int,
        entropy: Entropy,
        emit: Callable[[Event], None] | None,
        path: tuple[str, ...] = (),
    ) -> None:
        if type(max_steps) is not int or not 1 <= max_steps <= MAX_STEPS_BOUND:
            raise InvalidInputError(
                f"run {run_id!r}: {max_steps_problem(max_steps)}; pass it to compile() or "
                "invoke()/resume()",
                run_id=run_id,
                step=0,
            )
        self.plan = plan
        self.run_id = run_id
        self.values = values
        self.step = 0
        self.tasks: Sequence[Task] = ()
        self.joins_seen: dict[int, frozenset[str]] = {}
        self.max_steps = max_steps
        self.entropy = entropy
        self.emit = emit
        self.path = path
        # The thread the run is a turn of (its parent's, for a subgraph's child run).
        self.thread: str | None = None
        self.persistence: Persistence | None = None
        # Writes of tasks of the current step that finished before a crash or an interrupt,
        # and the journals of the current step's tasks, both loaded on resume.
        self.done: dict[tuple[str, int], dict[str, Any]] = {}
        self.journals: dict[tuple[str, int], list[JournalEntry]] = {}
        self.attempts: dict[str, int] = {}
        # The tasks of the current step that a node cache served (by node, index).
        self.cache_hits: set[tuple[str, int]] | None = set() if plan.cached else None
        self.skip_interrupt_before = False
        # Raw writes of every merged task, in merge order, when a parent subgraph node needs
        # them to project the child's outputs; child events to stream per task.
        self.collect: list[tuple[str, dict[str, Any]]] | None = None
        self.child_events: dict[tuple[str, int], list[Event]] = {}
        self.rules: RuleSet | None = None
        # The rule decision of the current step (not "continue"), saved with its checkpoint.
        self.decision: RuleDecision | None = None
        # In replay: where the run's recordings come from (handed to its tasks' journals,
        # so a subgraph node replays its child from it), and the recorded calls of the
        # current step's tasks, by (node, index).
        self.replay: ReplaySource | None = None
        self.replay_calls: dict[tuple[str, int], list[JournalEntry]] | None = None
        # The rule that ended the run and why; ``halted``: it stopped the run before the
        # end (a halt), rather than declaring the task complete (a finish).
        self.stopped_by: str | None = None
        self.stop_reason: str | None = None
        self.halted = False
        # The interrupt a rule decided at this step, stopped at once the step is committed.
        self.rule_interrupt: Interrupt | None = None
        # The interrupt the run stopped at, if it did.
        self.interrupt: Interrupt | None = None
        # Why the run is to stop at its next step boundary (see ``_cancel``); None: go on.
        self.cancelled: str | None = None
        # The state object built for this step's routers, handed on to the next step's task
        # when it runs alone (saves building the same pydantic object twice per step).
        self.view: Any = None
        # A live stream's feed (None when nobody streams the run live), the run's own event
        # loop under a sync driver (made on first need, closed when the run ends), the
        # results of async routers the async driver awaited before scheduling, and the
        # tasks of the step last completed.
        self.feed: Feed | None = None
        self.loop: RunLoop | None = None
        self.routed: dict[int, Any] | None = None
        self.ran: Sequence[Task] = ()
        # What each task position keeps between steps about its model conversation.
        self.conversations: Conversations = {}
        # Where the Commands of the step last merged go, in task order (see merge), and
        # whether one of them was for the parent graph (a child run then ends there).
        self.gotos: list[list[Any]] | None = None
        self.to_parent = False
        # How many steps of this run each subgraph node has been scheduled in, the current
        # one included: the position its child run id carries instead of the global step.
        self.activations: dict[str, int] = {}

    def activate(self, tasks: Sequence[Task]) -> None:
        """Count the step that runs ``tasks`` for the subgraph nodes among them (once per
        node, whatever its number of ``Send`` tasks); called as each step opens."""
        sited = self.plan.sited
        counts = self.activations
        for node in {t.node for t in tasks if t.node in sited}:
            counts[node] = counts.get(node, 0) + 1

    def restore_activations(self, steps: Sequence[StepRecord]) -> None:
        """Count the subgraph nodes' activations in the committed ``steps`` (a restored
        run's history), as :meth:`activate` counted them when they ran."""
        counts: dict[str, int] = {}
        ChildRunId.activations(steps, self.plan.sited, counts)
        self.activations = counts

    def where(self, node: str | None = None) -> _RunAt:
        """Where the run is (at ``node``), as the keywords that locate a :class:`RunError`."""
        return {"run_id": self.run_id, "step": self.step, "node": node}

    def event_loop(self) -> RunLoop:
        """The run's own event loop (sync drivers), started on first use."""
        loop = self.loop
        if loop is None:
            loop = self.loop = RunLoop()
        return loop

    def close_loop(self) -> None:
        """The run stopped executing: close its event loop, if it made one."""
        loop, self.loop = self.loop, None
        if loop is not None:
            loop.close()

    # ------------------------------------------------------------------ scheduling

    def schedule_entry(self) -> None:
        """Schedule the entry nodes (and conditional edges out of START) for step 1."""
        graph = self.plan
        if not graph.start_routers:
            # Fixed entry nodes: their tasks were made at compile time.
            self.tasks = graph.entry_tasks
            return
        state = fast_state(graph.state_model, dict(self.values))
        static = set(graph.ir.entry)
        sends: list[Send] = []
        for router in graph.start_routers:
            self._route(router, state, "__start__", static, sends)
        self.tasks = make_tasks(static, sends)

    def _route(
        self,
        router: RouterSpec,
        state: Any,
        source: str,
        static: set[str],
        sends: list[Send],
    ) -> None:

        try:
            routed = self.routed
            if router.is_async and routed is not None and id(router) in routed:
                result = routed.pop(id(router))  # awaited by the async driver
            else:
                if router.takes_ctx:
                    result = router.fn(state, self._ctx(source, 0, {}))
                else:
                    result = router.fn(state)
                if router.is_async and asyncio.iscoroutine(result):
                    # A sync driver: on the run's own loop, as its async nodes are.
                    result = self.event_loop().run(result)
        except StargraphError:
            raise
        except Exception as exc:
            raise self._router_failed(router, source, exc) from exc
        self._targets(router, source, result, static, sends)

    def _targets(
        self, router: RouterSpec, source: str, result: Any, static: set[str], sends: list[Send]
    ) -> None:
        """Sort what ``router`` returned into node targets (``static``) and ``sends``."""
        items = result if isinstance(result, list | tuple) else [result]
        for item in items:
            if isinstance(item, Send):
                if item.node not in router.mapping.values():
                    raise self._bad_route(router, source, item.node)
                sends.append(item)
                continue
            target = item if item == END else router.mapping.get(str(item))
            if target is None:
                raise self._bad_route(router, source, item)
            if target != END:
                static.add(target)

    async def await_routers(self, sources: Sequence[tuple[str, Sequence[RouterSpec]]]) -> None:
        """Await the async routers about to route (out of each ``(source, routers)``) on the
        running loop, before the sync scheduling code takes their results (async driver)."""
        state = None
        for source, routers in sources:
            for router in routers:
                if not router.is_async:
                    continue
                if state is None:
                    state = fast_state(self.plan.state_model, dict(self.values))
                try:
                    if router.takes_ctx:
                        result = router.fn(state, self._ctx(source, 0, {}))
                    else:
                        result = router.fn(state)
                    if asyncio.iscoroutine(result):
                        result = await result
                except StargraphError:
                    raise
                except Exception as exc:
                    raise self._router_failed(router, source, exc) from exc
                if self.routed is None:
                    self.routed = {}
                self.routed[id(router)] = result

    def _route_one(self, router: RouterSpec, source: str) -> Sequence[Task]:
        """The tasks a sync router without ctx schedules when it is the only way on out of
        ``source``: its one target's task from a table, or (a list, ``Send`` objects) the
        tasks made from what it returned, without calling it a second time."""
        try:
            result = router.fn(self.view)
        except StargraphError:
            raise
        except Exception as exc:
            raise self._router_failed(router, source, exc) from exc
        if isinstance(result, list | tuple | Send):
            static: set[str] = set()
            sends: list[Send] = []
            self._targets(router, source, result, static, sends)
            static.discard(END)
            return make_tasks(static, sends)
        target = result if result == END else router.mapping.get(str(result))
        if target is None:
            raise self._bad_route(router, source, result)
        return self.plan.single_tasks[target]

    def _router_failed(self, router: RouterSpec, source: str, exc: Exception) -> NodeError:
        return NodeError(
            f"router {router.ref!r} after node {source!r} failed at step {self.step} of "
            f"run {self.run_id!r}: {describe_exception(exc)}",
            **self.where(source),
        )

    def _bad_route(self, router: RouterSpec, source: str, got: Any) -> RunError:
        return RunError(
            f"router {router.ref!r} after node {source!r} returned {got!r} at step "
            f"{self.step} of run {self.run_id!r}, which is not one of its declared targets "
            f"{sorted(router.mapping)}; add it to the mapping of with_conditional_edges",
            **self.where(source),
        )

    def schedule_next(self, ran: Sequence[Task]) -> None:
        """Schedule successors of the tasks that just ran, from the merged state."""
        if self.to_parent:
            self.tasks = ()  # a Command sent the parent on: this child run is over
            return
        specs = self.plan.specs
        if len(ran) == 1:
            spec = specs[ran[0].node]
            if spec.only_static:
                # Chains without routers: the successors were computed at compile time.
                self.tasks = self.plan.static_tasks[spec.id]
                return
            if spec.one_router:
                # A loop or a branch: one router choosing one target is the common case.
                self.view = fast_state(self.plan.state_model, dict(self.values))
                self.tasks = self._route_one(spec.routers[0], spec.id)
                return
        static: set[str] = set()
        sends: list[Send] = []
        state = None
        done_nodes = sorted({t.node for t in ran})
        for node in done_nodes:
            spec = specs[node]
            static.update(spec.static_next)
            if spec.routers:
                if state is None:
                    state = fast_state(self.plan.state_model, dict(self.values))
                for router in spec.routers:
                    self._route(router, state, node, static, sends)
            for join in spec.joins:
                seen = self.joins_seen.get(join.index, frozenset()) | {node}
                if seen >= join.sources:
                    static.add(join.target)
                    seen = frozenset()
                self.joins_seen[join.index] = seen
        if self.gotos:
            # What Commands asked for comes on top of the edges, as the tasks that returned
            # them are ordered.
            for targets in self.gotos:
                for item in targets:
                    if type(item) is str:
                        static.add(item)
                    else:
                        sends.append(Send(item["node"], item["payload"]))
        static.discard(END)
        self.tasks = make_tasks(static, sends)

    # ------------------------------------------------------------------ execution

    def _ctx(
        self,
        node: str,
        index: int,
        config: Mapping[str, Any],
        fence: AttemptFence | None = None,
        attempt: int = 1,
    ) -> RunContext:
        journal = None
        if self.replay_calls is not None:
            journal = TaskJournal(
                step=self.step,
                node=node,
                index=index,
                entries=list(self.replay_calls.get((node, index), ())),
                persist=None,
                replay=True,
                run_id=self.run_id,
                fence=fence,
                attempt=attempt,
                source=self.replay,
                mask=self.plan.mask,
                conversations=self.conversations,
            )
        elif self.persistence is not None:
            # The list is shared with the run (and by every attempt of the task): at commit
            # it becomes the step's call record.
            journal = TaskJournal(
                step=self.step,
                node=node,
                index=index,
                entries=self.journals.setdefault((node, index), []),
                persist=self.persistence.journal_writer(self),
                run_id=self.run_id,
                fence=fence,
                attempt=attempt,
                mask=self.plan.mask,
                conversations=self.conversations,
            )
        feed = self.feed
        custom = None
        if feed is not None:
            if "messages" in feed.modes:
                if journal is None and self.plan.bindable:
                    # No store keeps this run's calls, but its models must reach the
                    # stream: a journal of this attempt alone, kept nowhere.
                    journal = TaskJournal(
                        step=self.step,
                        node=node,
                        index=index,
                        entries=[],
                        persist=None,
                        run_id=self.run_id,
                        fence=fence,
                        attempt=attempt,
                        ephemeral=True,
                        mask=self.plan.mask,
                        conversations=self.conversations,
                    )
                if journal is not None:
                    journal.tokens = self._sink(feed, "messages", node, index)
            if "custom" in feed.modes:
                custom = self._sink(feed, "custom", node, index)
        services = self.plan.services
        if journal is not None and self.plan.bindable:
            # Chat models and tool arbiters route their calls through this task's journal
            # (a loop, not a comprehension: that would be a second frame and dict per task).
            bound = ServiceMap(services)
            for name in self.plan.bindable:
                bound[name] = services[name].bind_journal(journal)
            services = bound
        if journal is not None and journal.replay:
            # A replay needs no live services: a model it was not given is answered by the
            # record (see runtime._offline).
            from stargraph.runtime._offline import OfflineServices

            services = OfflineServices(services, journal)
        return RunContext(
            run_id=self.run_id,
            step=self.step,
            node=node,
            index=index,
            path=self.path,
            config=config,
            entropy=self.entropy,
            journal=journal,
            services=services,
            events=None if self.emit is None else self.child_events.setdefault((node, index), []),
            custom=custom,
            feed=feed,
            conversations=self.conversations,
            remaining_steps=self.max_steps - self.step,
            thread_id=self.thread,
            cache_hits=self.cache_hits,
            activation=self.activations.get(node, 0),
        )

    def _sink(self, feed: Feed, mode: str, node: str, index: int) -> Callable[[Any], None]:
        """What a task hands its live items to: each becomes a typed chunk on the feed."""
        from stargraph.runtime._stream import CustomEvent, MessageChunk

        run_id, step, path = self.run_id, self.step, self.path
        if mode == "messages":

            def tokens(text: str) -> None:
                chunk = MessageChunk(
                    run_id=run_id, step=step, path=path, node=node, index=index, text=text
                )
                feed.put(mode, chunk)

            return tokens

        def custom(payload: Any) -> None:
            event = CustomEvent(
                run_id=run_id, step=step, path=path, node=node, index=index, payload=payload
            )
            feed.put(mode, event)

        return custom

    def task_state(self, task: Task) -> Any:
        """The state a task sees: current values, with a ``Send`` payload overlaid."""
        if self.view is not None and not task.payload and len(self.tasks) == 1:
            view, self.view = self.view, None
            return view
        values = dict(self.values)
        if task.payload:
            rules = self.plan.rules_of
            for key, value in task.payload.items():
                rule = rules.get(key)
                if rule is None:
                    raise self.write_error(task, f"Send payload key {key!r} is not a state field")
                validate, exact, check = rule
                if type(value) is exact:
                    valid = value
                else:
                    try:
                        valid = validate(value)
                    except ValidationError as exc:
                        raise self._bad_payload(task, key, exc) from exc
                values[key] = valid
                # A payload is stored with the step's tasks: it must come back as it was sent,
                # or a resumed task would see another state than the first attempt did.
                if check is not None and (found := check(valid)) is not None:
                    raise self._unstorable(task, f"was sent a payload for {key!r}", key, found)
        return fast_state(self.plan.state_model, values)

    def call_args(
        self,
        task: Task,
        spec: NodeSpec,
        fence: AttemptFence | None = None,
        attempt: int = 1,
    ) -> tuple[Any, ...]:
        """Positional arguments for one attempt of the node: ``(state,)`` or ``(state, ctx)``.

        Each attempt gets its own state object and ctx (with its own journal handle), so an
        abandoned attempt that still runs shares nothing mutable with the next one."""
        if spec.input is None:
            state = self.task_state(task)
        else:
            state = node_input(self.values, task, spec.input, run_id=self.run_id, step=self.step)
        if spec.takes_ctx:
            return (state, self._ctx(task.node, task.index, spec.config, fence, attempt))
        return (state,)

    @staticmethod
    def abandon_attempt(args: tuple[Any, ...]) -> None:
        """An attempt failed or timed out: revoke its ctx, so a thread still running it can
        no longer record or make journaled effects (see ``AttemptFence``)."""
        if len(args) == 2:
            args[1].revoke()

    def node_failed(self, task: Task, exc: BaseException) -> RunError:
        """Wrap a node's exception as a :class:`NodeError` naming node and step."""
        if isinstance(exc, MissingServiceError) and exc.node is None:
            return MissingServiceError(
                f"node {task.node!r} at step {self.step} of run {self.run_id!r}: {exc}",
                service=exc.service,
                **self.where(task.node),
            )
        if isinstance(exc, RunError):
            return exc
        return NodeError(
            f"node {task.node!r} failed at step {self.step} of run {self.run_id!r}: "
            f"{describe_exception(exc)}",
            **self.where(task.node),
        )

    def write_error(self, task: Task, what: str) -> InvalidWriteError:
        """An :class:`InvalidWriteError`: ``what`` the task did wrong, located."""
        return InvalidWriteError(
            f"node {task.node!r} at step {self.step} of run {self.run_id!r}: {what}",
            **self.where(task.node),
        )

    def _bad_payload(self, task: Task, key: str, exc: ValidationError) -> InvalidPayloadError:
        """The task's ``Send`` payload holds for ``key`` a value its field refuses."""
        return InvalidPayloadError(
            f"node {task.node!r} at step {self.step} of run {self.run_id!r} was sent an "
            f"invalid value for {key!r}: {describe_validation(exc)}; send a value the state "
            f"field {key!r} accepts",
            field=key,
            **self.where(task.node),
        )

    def _unstorable(
        self, task: Task, what: str, key: str, found: tuple[str, str]
    ) -> InvalidWriteError:
        """``what`` the task did put in ``key`` a value a checkpoint store cannot give back
        as it was (``found``: where in the value, and why)."""
        return self.write_error(
            task,
            f"{what} that a checkpoint store cannot give back as it was: "
            f"{key}{found[0]} is {found[1]}",
        )

    def validate_writes(self, task: Task, result: Any) -> dict[str, Any]:
        """Check one task's return value and validate each written value."""
        if result is None:
            return {}
        # type() first: isinstance against the Mapping ABC is several times slower.
        if type(result) is not dict and not isinstance(result, Mapping):
            if isinstance(result, Command):
                return commanded(self, task, result)
            raise self.write_error(
                task,
                f"returned {type(result).__name__}, not a mapping; return a dict of the "
                "channels it changed, e.g. {'counter': 1}, or None",
            )
        table = self.plan.writable[task.node]
        writes: dict[str, Any] = {}
        for key, value in result.items():
            rule = table.get(key)
            if rule is None:
                raise self._refused_key(task, key)
            validate, exact, check = rule
            if type(value) is exact:
                valid = value  # what the validator would hand back
            else:
                try:
                    valid = validate(value)
                except ValidationError as exc:
                    raise self.write_error(
                        task, f"wrote an invalid value to {key!r}: {exc.errors()[0]['msg']}"
                    ) from exc
            writes[key] = valid
            # Only what a checkpoint store gives back unchanged: a tuple in an Any field
            # would come back a list, so a resumed run would see another state.
            if check is not None and (found := check(valid)) is not None:
                raise self._unstorable(task, f"wrote to {key!r} a value", key, found)
        return writes

    def _refused_key(self, task: Task, key: str) -> InvalidWriteError:
        """The task wrote ``key``, which is no state field or outside its declared writes."""
        channels = self.plan.channels
        if key not in channels:
            return self.write_error(
                task,
                f"wrote key {key!r}, which the state {self.plan.state_model.__name__} "
                f"lacks (fields: {sorted(channels)}); add the field or drop the key",
            )
        if key in self.plan.managed:
            return self.write_error(
                task,
                f"wrote key {key!r}, a managed value the graph fills in (RemainingSteps); "
                "read it, and keep what the node writes in another field",
            )
        allowed = self.plan.specs[task.node].writes
        return self.write_error(
            task,
            f"wrote key {key!r} outside its declared writes {sorted(allowed or ())}; "
            "declare it in with_node(..., writes=[...])",
        )

    def merge(self, results: Sequence[tuple[Task, dict[str, Any]]]) -> None:
        """Merge validated writes in task order through the reducers (invariant 2)."""
        channels = self.plan.channels
        self.view = None
        if self.plan.commands or self.path:
            results = take_gotos(self, results)
        values = dict(self.values)
        if len(results) == 1:
            # Fast path for chains: one task, no conflicts possible.
            if self.collect is not None:
                self.collect.append((results[0][0].node, results[0][1]))
            reduce_writes(channels, values, results[0][1])
            self.values = values
            return
        ordered = sorted(results, key=by_task)
        if self.collect is not None:
            self.collect.extend((t.node, w) for t, w in ordered)
        unreduced = self.plan.unreduced
        writers: dict[str, Task] = {}
        # The step's own copies of the lists its append channels extend (one copy per
        # channel and step, not one per task).
        owned: set[str] = set()
        for task, writes in ordered:
            for key in writes:
                if key in unreduced:
                    if key in writers:
                        first = writers[key]
                        raise InvalidWriteError(
                            f"nodes {first.node!r} and {task.node!r} both wrote {key!r} at "
                            f"step {self.step} of run {self.run_id!r}, and {key!r} has no "
                            "reducer; declare one, e.g. Annotated[..., reducers.append], or "
                            "let only one branch write it",
                            **self.where(task.node),
                        )
                    writers[key] = task
            reduce_writes(channels, values, writes, owned=owned)
        self.values = values

    def committed(self) -> None:
        """The step is in the store (or there is none): clear its bookkeeping - rule
        decision, attempts, pending writes and journals - before the next one starts.
        Those still empty stay (most steps retry nothing and record no call): nothing
        holds on to these dicts, and every committed step passes here."""
        self.decision = None
        if self.attempts:
            self.attempts = {}
        if self.done:
            self.done = {}
        if self.journals:
            self.journals = {}

    def check_step_limit(self) -> None:
        """Raise :class:`StepLimitExceeded` before a step beyond the limit would start."""
        if self.step > self.max_steps:
            self.step -= 1  # the step did not happen; events and errors name the last one
            raise StepLimitExceeded(
                f"run {self.run_id!r} reached its step limit of {self.max_steps} with nodes "
                f"{[t.node for t in self.tasks]} still scheduled; raise max_steps in "
                "compile()/invoke(), or add a rule or edge that ends the loop",
                **self.where(),
            )


_task = Task._make  # builds the tuple directly, without the Python-level __new__


def make_tasks(static: set[str], sends: list[Send]) -> list[Task]:
    """A step's tasks: one per ``static`` target, one per ``Send`` (numbered from 1 per node,
    in the order they were sent), in ``(node, index)`` order."""
    tasks = [_task((node, 0, None)) for node in static]
    counters: dict[str, int] = {}
    for send in sends:
        node = send.node
        index = counters.get(node, 0) + 1
        counters[node] = index
        tasks.append(_task((node, index, dict(send.payload))))
    # (node, index) order: no two tasks of a step share both, so payloads never compare.
    tasks.sort()
    return tasks


def refuse_unknown_keys(model: type[BaseModel], input: Any, run_id: str | None) -> None:
    """A key of a run's input that names no field of ``model`` is a typo, not something to
    drop: raise :class:`InvalidInputError` naming it."""
    if type(input) is not dict and not isinstance(input, Mapping):
        return
    fields = model.model_fields
    if all(key in fields for key in input):
        return  # the common case, checked without building the set of aliases
    if model.model_config.get("extra") == "allow":
        return
    known = set(fields)
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


def initial_values(
    model: type[BaseModel], input: Mapping[str, Any] | BaseModel | None, run_id: str
) -> dict[str, Any]:
    """The channel values a run of state ``model`` starts from, given its ``input``."""
    data: Any = {} if input is None else input
    if isinstance(data, BaseModel):
        data = data.model_dump()
    try:
        state = validate_raw(model, data)
    except ValidationError as exc:
        raise InvalidInputError(
            f"input of run {run_id!r} does not fit {model.__name__}: {describe_validation(exc)}",
            run_id=run_id,
            step=0,
        ) from exc
    # The validated fields themselves, as channel values (model_dump would copy nested
    # models into dicts, which no reducer or node expects).
    return dict(state.__dict__)
