"""The executor: superstep semantics over a pydantic state.

A run is a sequence of *steps*. In each step every scheduled task (node execution) runs -
concurrently where that helps (async nodes on asyncio, ``blocking`` sync nodes on threads),
otherwise inline in a fixed order - and then, only when all have finished, their writes merge
in ``(node, index)`` order through the channels' reducers. Successors are scheduled from the
merged state. Nothing about the result depends on which task finished first.

``_Run`` is the step machine shared by the sync and async drivers; the drivers differ only in
how a step's tasks are executed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from stargraph.errors import (
    InvalidInputError,
    InvalidWriteError,
    NodeError,
    RunError,
    StargraphError,
    StepLimitExceeded,
)
from stargraph.ir import END, GraphIR
from stargraph.runtime._context import Entropy, RunContext, SystemEntropy
from stargraph.runtime._events import (
    Event,
    NodeFinished,
    NodeStarted,
    RunFailed,
    RunFinished,
    RunStarted,
    StepCompleted,
)
from stargraph.runtime._plan import NodeSpec, RouterSpec, Task
from stargraph.state import Channel, fast_state

if TYPE_CHECKING:
    from stargraph.graph import Send

__all__ = ["CompiledGraph"]

StateT = TypeVar("StateT", bound=BaseModel)

DEFAULT_MAX_STEPS = 10_000
"""Supersteps a run may take before :class:`StepLimitExceeded` (override per compile/run)."""


class _Run:
    """One run's mutable progress: channel values, step counter, pending tasks, joins."""

    __slots__ = (
        "emit",
        "entropy",
        "graph",
        "joins_seen",
        "max_steps",
        "path",
        "run_id",
        "step",
        "tasks",
        "values",
    )

    def __init__(
        self,
        graph: CompiledGraph[Any],
        run_id: str,
        values: dict[str, Any],
        *,
        max_steps: int,
        entropy: Entropy,
        emit: Callable[[Event], None] | None,
        path: tuple[str, ...] = (),
    ) -> None:
        self.graph = graph
        self.run_id = run_id
        self.values = values
        self.step = 0
        self.tasks: Sequence[Task] = ()
        self.joins_seen: dict[int, frozenset[str]] = {}
        self.max_steps = max_steps
        self.entropy = entropy
        self.emit = emit
        self.path = path

    # ------------------------------------------------------------------ scheduling

    def schedule_entry(self) -> None:
        """Schedule the entry nodes (and conditional edges out of START) for step 1."""
        graph = self.graph
        state = fast_state(graph.state_model, dict(self.values))
        static = set(graph.ir.entry)
        sends: list[Send] = []
        for router in graph.start_routers:
            self._route(router, state, "__start__", static, sends)
        self.tasks = _make_tasks(static, sends)

    def _route(
        self,
        router: RouterSpec,
        state: Any,
        source: str,
        static: set[str],
        sends: list[Send],
    ) -> None:
        from stargraph.graph import Send

        try:
            if router.takes_ctx:
                result = router.fn(state, self._ctx(source, 0, {}))
            else:
                result = router.fn(state)
            if router.is_async:
                result = _run_coroutine(result)
        except StargraphError:
            raise
        except Exception as exc:
            raise NodeError(
                f"router {router.ref!r} after node {source!r} failed at step {self.step} of "
                f"run {self.run_id!r}: {type(exc).__name__}: {exc}",
                run_id=self.run_id,
                step=self.step,
                node=source,
            ) from exc
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

    def _bad_route(self, router: RouterSpec, source: str, got: Any) -> RunError:
        return RunError(
            f"router {router.ref!r} after node {source!r} returned {got!r} at step "
            f"{self.step} of run {self.run_id!r}, which is not one of its declared targets "
            f"{sorted(router.mapping)}; add it to the mapping of with_conditional_edges",
            run_id=self.run_id,
            step=self.step,
            node=source,
        )

    def schedule_next(self, ran: Sequence[Task]) -> None:
        """Schedule successors of the tasks that just ran, from the merged state."""
        specs = self.graph.specs
        if len(ran) == 1:
            spec = specs[ran[0].node]
            if spec.only_static:
                # Chains and loops without routers: the successors were computed at compile.
                self.tasks = self.graph.static_tasks[spec.id]
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
                    state = fast_state(self.graph.state_model, dict(self.values))
                for router in spec.routers:
                    self._route(router, state, node, static, sends)
            for join in spec.joins:
                seen = self.joins_seen.get(join.index, frozenset()) | {node}
                if seen >= join.sources:
                    static.add(join.target)
                    seen = frozenset()
                self.joins_seen[join.index] = seen
        static.discard(END)
        self.tasks = _make_tasks(static, sends)

    # ------------------------------------------------------------------ execution

    def _ctx(self, node: str, index: int, config: Mapping[str, Any]) -> RunContext:
        return RunContext(
            run_id=self.run_id,
            step=self.step,
            node=node,
            index=index,
            path=self.path,
            config=config,
            entropy=self.entropy,
        )

    def task_state(self, task: Task) -> Any:
        """The state a task sees: current values, with a ``Send`` payload overlaid."""
        values = dict(self.values)
        if task.payload:
            channels = self.graph.channels
            for key, value in task.payload.items():
                channel = channels.get(key)
                if channel is None:
                    raise self._write_error(task, f"Send payload key {key!r} is not a state field")
                values[key] = channel.validate(value)
        return fast_state(self.graph.state_model, values)

    def call_args(self, task: Task, spec: NodeSpec) -> tuple[Any, ...]:
        """Positional arguments for the node: ``(state,)`` or ``(state, ctx)``."""
        state = self.task_state(task)
        if spec.takes_ctx:
            return (state, self._ctx(task.node, task.index, spec.config))
        return (state,)

    def node_failed(self, task: Task, exc: BaseException) -> RunError:
        """Wrap a node's exception as a :class:`NodeError` naming node and step."""
        if isinstance(exc, RunError):
            return exc
        return NodeError(
            f"node {task.node!r} failed at step {self.step} of run {self.run_id!r}: "
            f"{type(exc).__name__}: {exc}",
            run_id=self.run_id,
            step=self.step,
            node=task.node,
        )

    def _write_error(self, task: Task, what: str) -> InvalidWriteError:
        return InvalidWriteError(
            f"node {task.node!r} at step {self.step} of run {self.run_id!r}: {what}",
            run_id=self.run_id,
            step=self.step,
            node=task.node,
        )

    def validate_writes(self, task: Task, result: Any) -> dict[str, Any]:
        """Check one task's return value and validate each written value."""
        if result is None:
            return {}
        if not isinstance(result, Mapping):
            raise self._write_error(
                task,
                f"returned {type(result).__name__}, not a mapping; return a dict of the "
                "channels it changed, e.g. {'counter': 1}, or None",
            )
        channels = self.graph.channels
        allowed = self.graph.specs[task.node].writes
        writes: dict[str, Any] = {}
        for key, value in result.items():
            channel = channels.get(key)
            if channel is None:
                raise self._write_error(
                    task,
                    f"wrote key {key!r}, which the state {self.graph.state_model.__name__} "
                    f"lacks (fields: {sorted(channels)}); add the field or drop the key",
                )
            if allowed is not None and key not in allowed:
                raise self._write_error(
                    task,
                    f"wrote key {key!r} outside its declared writes {sorted(allowed)}; "
                    "declare it in with_node(..., writes=[...])",
                )
            try:
                writes[key] = channel.validate(value)
            except ValidationError as exc:
                raise self._write_error(
                    task, f"wrote an invalid value to {key!r}: {exc.errors()[0]['msg']}"
                ) from exc
        return writes

    def merge(self, results: Sequence[tuple[Task, dict[str, Any]]]) -> None:
        """Merge validated writes in task order through the reducers (invariant 2)."""
        channels = self.graph.channels
        if len(results) == 1:
            # Fast path for chains: one task, no conflicts possible.
            values = dict(self.values)
            for key, value in results[0][1].items():
                reducer = channels[key].reducer
                values[key] = value if reducer is None else reducer(values[key], value)
            self.values = values
            return
        writers: dict[str, Task] = {}
        values = dict(self.values)
        for task, writes in sorted(results, key=lambda r: r[0].key):
            for key, value in writes.items():
                channel: Channel = channels[key]
                if channel.reducer is None:
                    if key in writers:
                        first = writers[key]
                        raise InvalidWriteError(
                            f"nodes {first.node!r} and {task.node!r} both wrote {key!r} at "
                            f"step {self.step} of run {self.run_id!r}, and {key!r} has no "
                            "reducer; declare one, e.g. Annotated[..., reducers.append], or "
                            "let only one branch write it",
                            run_id=self.run_id,
                            step=self.step,
                            node=task.node,
                        )
                    writers[key] = task
                    values[key] = value
                else:
                    values[key] = channel.reducer(values[key], value)
        self.values = values

    def check_step_limit(self) -> None:
        """Raise :class:`StepLimitExceeded` before a step beyond the limit would start."""
        if self.step > self.max_steps:
            self.step -= 1  # the step did not happen; events and errors name the last one
            raise StepLimitExceeded(
                f"run {self.run_id!r} reached its step limit of {self.max_steps} with nodes "
                f"{[t.node for t in self.tasks]} still scheduled; raise max_steps in "
                "compile()/invoke(), or add a rule or edge that ends the loop",
                run_id=self.run_id,
                step=self.step,
            )


def _make_tasks(static: set[str], sends: list[Send]) -> list[Task]:
    tasks = [Task(node) for node in static]
    counters: dict[str, int] = {}
    for send in sends:
        index = counters.get(send.node, 0) + 1
        counters[send.node] = index
        tasks.append(Task(send.node, index, dict(send.payload)))
    tasks.sort(key=lambda t: (t.node, t.index))
    return tasks


def _run_coroutine(coro: Any) -> Any:
    return asyncio.run(coro) if asyncio.iscoroutine(coro) else coro


class CompiledGraph(Generic[StateT]):
    """A validated graph, ready to run. Build it with ``Graph.compile()``.

    ``invoke`` / ``ainvoke`` return the final state; ``stream`` / ``astream`` yield typed
    events. ``graph_hash`` identifies exactly the behaviour being run.
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
    ) -> None:
        self.ir = ir
        self.state_model = state_model
        self.channels = channels
        self.specs = specs
        self.start_routers = tuple(start_routers)
        self.max_steps = max_steps
        self._entropy_factory = entropy
        self.static_tasks: dict[str, tuple[Task, ...]] = {
            node: tuple(Task(n) for n in spec.static_next if n != END)
            for node, spec in specs.items()
        }
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def graph_hash(self) -> str:
        """``"sha256:<hex>"`` of the behavioural content of the graph."""
        return self.ir.graph_hash

    # ------------------------------------------------------------------ public API

    def invoke(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
    ) -> StateT:
        """Run to the end and return the final state."""
        run = self._new_run(input, run_id, max_steps, emit=None)
        self._drive(run)
        return self._final(run)

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
        try:
            for _ in self._drive_steps(run):
                yield from buffer
                buffer.clear()
        except StargraphError:
            # The consumer sees the failing step's events and run_failed before the error.
            yield from buffer
            raise
        yield from buffer

    async def ainvoke(
        self,
        input: Mapping[str, Any] | StateT | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
    ) -> StateT:
        """Async :meth:`invoke`: async nodes of one step run concurrently on this loop."""
        run = self._new_run(input, run_id, max_steps, emit=None)
        async for _ in self._adrive_steps(run):
            pass
        return self._final(run)

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
            async for _ in self._adrive_steps(run):
                for event in buffer:
                    yield event
                buffer.clear()
        except StargraphError:
            for event in buffer:
                yield event
            raise
        for event in buffer:
            yield event

    # ------------------------------------------------------------------ internals

    def _new_run(
        self,
        input: Mapping[str, Any] | BaseModel | None,
        run_id: str | None,
        max_steps: int | None,
        emit: Callable[[Event], None] | None,
    ) -> _Run:
        run_id = run_id or f"run-{uuid.uuid4().hex[:16]}"
        values = self._initial_values(input, run_id)
        return _Run(
            self,
            run_id,
            values,
            max_steps=max_steps if max_steps is not None else self.max_steps,
            entropy=self._entropy_factory(),
            emit=emit,
        )

    def _initial_values(self, input: Mapping[str, Any] | BaseModel | None, run_id: str) -> Any:
        data: Any = {} if input is None else input
        if isinstance(data, BaseModel):
            data = data.model_dump()
        try:
            state = self.state_model.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}"
                for e in exc.errors()
            )
            raise InvalidInputError(
                f"input of run {run_id!r} does not fit {self.state_model.__name__}: {problems}",
                run_id=run_id,
                step=0,
            ) from exc
        return dict(state.__dict__)

    def _final(self, run: _Run) -> StateT:
        return self.state_model.model_validate(run.values)

    def _drive(self, run: _Run) -> None:
        # The same loop as _drive_steps without the generator, which costs ~0.5 µs per step.
        try:
            self._start_events(run)
            run.schedule_entry()
            while run.tasks:
                run.step += 1
                run.check_step_limit()
                self._complete_step(run, self._execute_sync(run, run.tasks))
            self._finish(run)
        except StargraphError as exc:
            self._fail(run, exc)
            raise

    def _start_events(self, run: _Run) -> None:
        if run.emit is not None:
            run.emit(RunStarted(run_id=run.run_id, step=0, graph_hash=self.graph_hash))

    def _drive_steps(self, run: _Run) -> Iterator[int]:
        """Sync driver: yields after each completed step."""
        try:
            self._start_events(run)
            run.schedule_entry()
            while run.tasks:
                run.step += 1
                run.check_step_limit()
                results = self._execute_sync(run, run.tasks)
                self._complete_step(run, results)
                yield run.step
            self._finish(run)
        except StargraphError as exc:
            self._fail(run, exc)
            raise

    async def _adrive_steps(self, run: _Run) -> AsyncIterator[int]:
        """Async driver: yields after each completed step."""
        try:
            self._start_events(run)
            run.schedule_entry()
            while run.tasks:
                run.step += 1
                run.check_step_limit()
                results = await self._execute_async(run, run.tasks)
                self._complete_step(run, results)
                yield run.step
            self._finish(run)
        except StargraphError as exc:
            self._fail(run, exc)
            raise

    def _complete_step(self, run: _Run, results: list[tuple[Task, dict[str, Any]]]) -> None:
        ran = [task for task, _ in results]
        run.merge(results)
        if run.emit is not None:
            for task, writes in sorted(results, key=lambda r: r[0].key):
                run.emit(
                    NodeFinished(
                        run_id=run.run_id,
                        step=run.step,
                        path=run.path,
                        node=task.node,
                        index=task.index,
                        writes=_jsonable(self.channels, writes),
                    )
                )
        run.schedule_next(ran)
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

    def _finish(self, run: _Run) -> None:
        if run.emit is not None:
            run.emit(
                RunFinished(
                    run_id=run.run_id,
                    step=run.step,
                    path=run.path,
                    state=_jsonable(self.channels, run.values),
                )
            )

    def _fail(self, run: _Run, exc: StargraphError) -> None:
        if run.emit is not None:
            run.emit(
                RunFailed(
                    run_id=run.run_id,
                    step=run.step,
                    path=run.path,
                    node=getattr(exc, "node", None),
                    error=str(exc),
                    error_type=type(exc).__name__,
                )
            )

    def _emit_started(self, run: _Run, tasks: Sequence[Task]) -> None:
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

    def _execute_sync(self, run: _Run, tasks: Sequence[Task]) -> list[tuple[Task, dict[str, Any]]]:
        specs = self.specs
        self._emit_started(run, tasks)
        if len(tasks) == 1:
            task = tasks[0]
            spec = specs[task.node]
            if not spec.is_async and not spec.timeout_s:
                try:
                    result = spec.fn(*run.call_args(task, spec))
                except StargraphError:
                    raise
                except Exception as exc:
                    raise run.node_failed(task, exc) from exc
                return [(task, run.validate_writes(task, result))]
        if any(specs[t.node].is_async for t in tasks):
            return asyncio.run(self._execute_async(run, tasks, emit_started=False))
        results: list[tuple[Task, dict[str, Any]]] = []
        futures: list[tuple[Task, concurrent.futures.Future[Any]]] = []
        for task in tasks:
            spec = specs[task.node]
            if spec.blocking or spec.timeout_s:
                futures.append((task, self._threads().submit(spec.fn, *run.call_args(task, spec))))
        for task in tasks:
            spec = specs[task.node]
            if spec.blocking or spec.timeout_s:
                continue
            try:
                result = spec.fn(*run.call_args(task, spec))
            except StargraphError:
                raise
            except Exception as exc:
                raise run.node_failed(task, exc) from exc
            results.append((task, run.validate_writes(task, result)))
        for task, future in futures:
            spec = specs[task.node]
            try:
                result = future.result(timeout=spec.timeout_s)
            except concurrent.futures.TimeoutError as exc:
                raise _timeout(run, task, spec) from exc
            except StargraphError:
                raise
            except Exception as exc:
                raise run.node_failed(task, exc) from exc
            results.append((task, run.validate_writes(task, result)))
        return results

    async def _execute_async(
        self, run: _Run, tasks: Sequence[Task], *, emit_started: bool = True
    ) -> list[tuple[Task, dict[str, Any]]]:
        loop = asyncio.get_running_loop()
        specs = self.specs
        if emit_started:
            self._emit_started(run, tasks)
        pending: list[tuple[Task, asyncio.Future[Any]]] = []
        results: list[tuple[Task, dict[str, Any]]] = []
        for task in tasks:
            spec = specs[task.node]
            args = run.call_args(task, spec)
            if spec.is_async:
                fut: asyncio.Future[Any] = asyncio.ensure_future(spec.fn(*args))
            elif spec.blocking or spec.timeout_s:
                fut = loop.run_in_executor(self._threads(), _call, spec.fn, args)
            else:
                continue
            if spec.timeout_s:
                fut = asyncio.ensure_future(asyncio.wait_for(fut, spec.timeout_s))
            pending.append((task, fut))
        for task in tasks:
            spec = specs[task.node]
            if spec.is_async or spec.blocking or spec.timeout_s:
                continue
            try:
                result = spec.fn(*run.call_args(task, spec))
            except StargraphError:
                await _cancel(pending)
                raise
            except Exception as exc:
                await _cancel(pending)
                raise run.node_failed(task, exc) from exc
            results.append((task, run.validate_writes(task, result)))
        for task, fut in pending:
            spec = specs[task.node]
            try:
                result = await fut
            except TimeoutError as exc:
                await _cancel(pending)
                raise _timeout(run, task, spec) from exc
            except StargraphError:
                await _cancel(pending)
                raise
            except Exception as exc:
                await _cancel(pending)
                raise run.node_failed(task, exc) from exc
            results.append((task, run.validate_writes(task, result)))
        return results

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


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return fn(*args)


def _timeout(run: _Run, task: Task, spec: NodeSpec) -> RunError:
    from stargraph.errors import NodeTimeoutError

    return NodeTimeoutError(
        f"node {task.node!r} exceeded its timeout of {spec.timeout_s}s at step {run.step} of "
        f"run {run.run_id!r}; raise timeout_s or make the node faster",
        run_id=run.run_id,
        step=run.step,
        node=task.node,
    )


async def _cancel(pending: Sequence[tuple[Task, asyncio.Future[Any]]]) -> None:
    for _, fut in pending:
        fut.cancel()
    await asyncio.gather(*(f for _, f in pending), return_exceptions=True)


def _jsonable(channels: Mapping[str, Channel], values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: channels[k].adapter.dump_python(v, mode="json") for k, v in values.items()}
