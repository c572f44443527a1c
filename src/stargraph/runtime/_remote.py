"""Branch work in other processes: ``compile(executor=...)``.

Given any :class:`concurrent.futures.Executor` (a ``ProcessPoolExecutor``,
:class:`stargraph.runtime.ray.RayExecutor`, Dask's ``client.get_executor()``), the tasks of
sync ``blocking=True`` nodes in a step of two or more tasks (a fan-out, a ``Send`` map) are
sent to it. What crosses the process boundary is a *picklable call*: the module-level function
:func:`run_remote` and a plain dict of JSON data - the node's import path, the state model's
import path, the state values, and a small description of the task's context. The worker
rebuilds the state, calls the node, and returns its writes as JSON.

Everything else stays in the orchestrating process: it validates the returned writes and merges
them exactly as local writes (same ``(node, index)`` order, same events), it alone writes
checkpoints (pending writes, journal entries, steps), and it applies retries and timeouts.
Replay always runs locally, so a replayed run equals the live one wherever its branches ran.

The limit: a remote node must be a pure function of its state and config. In the worker its
``ctx`` has no store, no services and no way to interrupt the run, so ``ctx.once``,
``ctx.record_call``, ``ctx.interrupt`` and ``ctx.services`` raise :class:`RemoteContextError`
(run it with ``blocking=False`` to keep it in the orchestrating process). ``ctx.now()``,
``ctx.uuid()`` and ``ctx.random()`` work: a :class:`SeededEntropy` travels as its seed and
draws by position, so a seeded run draws the same values wherever a branch runs, and in a
durable run the draws come back with the writes and are journaled by the orchestrator, so a
resumed or replayed run is served the same values.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_jsonable_python

from stargraph.errors import Problem, RemoteContextError
from stargraph.ir import FunctionNodeIR, GraphIR
from stargraph.refs import resolve_ref
from stargraph.runtime._context import RunContext, TaskJournal, entropy_from_spec, entropy_spec
from stargraph.runtime._plan import Command, NodeSpec, Send, Task
from stargraph.runtime._values import describe_exception, jsonable
from stargraph.state import fast_state

if TYPE_CHECKING:
    from stargraph.runtime._run import Run

__all__ = ["Remote", "RemoteCall", "RemoteContextError", "remote_problems", "run_remote"]


class _NotRemote(BaseException):
    # A BaseException, like GraphInterrupt, so a node's own ``except Exception`` cannot
    # swallow it: the worker reports it and the orchestrator raises RemoteContextError.
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class RemoteCall(TypedDict):
    """Everything a worker needs to run one task; plain JSON data, so any executor can ship
    it (``journal`` is ``None`` when the orchestrator keeps no journal for the task)."""

    node_ref: str
    state_ref: str
    values: dict[str, Any]
    payload: dict[str, Any]
    takes_ctx: bool
    run_id: str
    step: int
    node: str
    index: int
    path: list[str]
    config: dict[str, Any]
    entropy: dict[str, Any] | None
    journal: list[dict[str, Any]] | None


# --------------------------------------------------------------------------- compile time


def remote_problems(ir: GraphIR, fns: Mapping[str, Callable[..., Any]]) -> list[Problem]:
    """Why the nodes that would run on the executor cannot: a worker imports a node (and the
    state model) by ``module:qualname``, so a registry id or a path that does not import back
    to the same object is refused at compile time."""
    problems: list[Problem] = []
    remote = False
    for i, node in enumerate(ir.nodes):
        if not isinstance(node, FunctionNodeIR) or not node.blocking:
            continue
        fn = fns.get(node.ref)
        if fn is None or _is_async(fn):
            continue
        remote = True
        if not _imports_back(node.ref, fn):
            problems.append(
                Problem(
                    f"/nodes/{i}",
                    f"node {node.id!r} is blocking=True, so with compile(executor=...) it runs "
                    f"in another process, which imports it by path; {node.ref!r} is a registry "
                    "id (or a path that does not import back to the same callable)",
                    "define the function at module level and drop ref=, or pass "
                    "blocking=False to keep the node in the orchestrating process",
                )
            )
    if remote and not _imports_back(ir.state.ref, None):
        problems.append(
            Problem(
                "/state/ref",
                f"the state model {ir.state.ref!r} cannot be imported by path, so blocking "
                "nodes cannot run on the executor given to compile(executor=...)",
                "define the state model at module level",
            )
        )
    return problems


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - the bound __call__, not callable()
    )


def _imports_back(ref: str, obj: Any) -> bool:
    try:
        found = resolve_ref(ref)
    except (ImportError, AttributeError):
        return False
    return obj is None or found is obj or getattr(found, "__wrapped__", None) is obj


# --------------------------------------------------------------------------- orchestrator


class Remote:
    """The executor of one compiled graph and the nodes that may run on it."""

    __slots__ = ("_values", "executor", "nodes", "state_ref")

    def __init__(
        self,
        executor: concurrent.futures.Executor,
        specs: Mapping[str, NodeSpec],
        state_ref: str,
    ) -> None:
        self.executor = executor
        self.state_ref = state_ref
        # Sync blocking function nodes (subgraph nodes always run here: their child run
        # checkpoints through this process's store).
        self.nodes = frozenset(
            node
            for node, spec in specs.items()
            if spec.blocking and not spec.is_async and spec.kind == "function"
        )
        # The JSON of the run values last shipped: every task of a step shares it.
        self._values: tuple[Any, dict[str, Any]] | None = None

    def for_step(self, run: Run, tasks: Any) -> Remote | None:
        """``self`` when this step's blocking tasks go to the executor: two or more tasks,
        and not a replay (replay runs locally, from the record)."""
        if len(tasks) < 2 or run.replay_calls is not None:
            return None
        return self

    def handles(self, spec: NodeSpec) -> bool:
        """Whether tasks of this node go to the executor."""
        return spec.id in self.nodes

    def _values_json(self, run: Run) -> dict[str, Any]:
        cached = self._values
        if cached is not None and cached[0] is run.values:
            return cached[1]
        values = jsonable(run.plan.channels, run.values)
        self._values = (run.values, values)
        return values

    def prepare(self, run: Run, task: Task, spec: NodeSpec, args: tuple[Any, ...]) -> RemoteCall:
        """The picklable call for one task; ``args`` are the local ``call_args`` (their ctx
        carries the task's journal, whose recorded entries the worker is served)."""
        ctx: RunContext | None = args[1] if len(args) == 2 else None
        journal = None
        if ctx is not None and ctx.journal is not None:
            journal = [e.model_dump(mode="json") for e in ctx.journal.entries]
        return RemoteCall(
            node_ref=spec.ref,
            state_ref=self.state_ref,
            values=self._values_json(run),
            payload=dict(task.payload or {}),
            takes_ctx=spec.takes_ctx,
            run_id=run.run_id,
            step=run.step,
            node=task.node,
            index=task.index,
            path=list(run.path),
            config=dict(spec.config),
            entropy=_entropy_spec(run, task) if spec.takes_ctx else None,
            journal=journal,
        )

    def call(self, run: Run, task: Task, spec: NodeSpec, args: tuple[Any, ...]) -> Any:
        """Run one task on the executor and wait (``timeout_s`` counts from submission);
        return its writes as JSON, or raise what the node raised."""
        future = self.executor.submit(run_remote, self.prepare(run, task, spec, args))
        try:
            reply = future.result(timeout=spec.timeout_s or None)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
        return self.unpack(run, task, args, reply)

    async def acall(self, run: Run, task: Task, spec: NodeSpec, args: tuple[Any, ...]) -> Any:
        """Async :meth:`call` (the caller applies ``timeout_s``)."""
        future = self.executor.submit(run_remote, self.prepare(run, task, spec, args))
        reply = await asyncio.wrap_future(future)
        return self.unpack(run, task, args, reply)

    def unpack(self, run: Run, task: Task, args: tuple[Any, ...], reply: dict[str, Any]) -> Any:
        """Journal the worker's calls through the local ctx, then give its writes (JSON, for
        ``run.validate_writes``) or raise its error."""
        if "forbidden" in reply:
            raise RemoteContextError(
                f"node {task.node!r} used {reply['forbidden']} at step {run.step} of run "
                f"{run.run_id!r} while running on the executor given to compile(executor=...); "
                "remote nodes must be pure functions of state and config (ctx.now, ctx.uuid "
                "and ctx.random are fine): pass blocking=False to run it in the orchestrating "
                "process",
                **run.where(task.node),
            )
        if "error" in reply:
            exc: BaseException = reply["error"]
            if reply.get("traceback"):
                exc.add_note("remote traceback:\n" + reply["traceback"])
            raise exc
        ctx: RunContext | None = args[1] if len(args) == 2 else None
        if ctx is not None and ctx.journal is not None:
            from stargraph.checkpoint import JournalEntry

            # Recorded entries the worker was served hit; new ones are recorded and persisted
            # here, the only process that writes to the store.
            for raw in reply["calls"]:
                entry = JournalEntry.model_validate(raw)
                ctx.journal.call(
                    entry.kind, entry.key, functools.partial(_value, entry), request=entry.request
                )
        writes = reply["writes"]
        if type(writes) is dict and _COMMAND in writes:
            return _command(writes[_COMMAND])
        return writes


_COMMAND = "__command__"
"""The key a remote node's ``Command`` comes back under (no state field is so named)."""


def _command(fields: dict[str, Any]) -> Command:
    """A ``Command`` back from its JSON fields."""
    goto = fields["goto"]
    items = goto if isinstance(goto, list) else [goto]
    return Command(
        update=fields["update"],
        goto=[Send(i["node"], i["payload"]) if isinstance(i, dict) else i for i in items],
        graph=fields["graph"],
        resume=fields["resume"],
    )


def _value(entry: Any) -> Any:
    return entry.value


def _entropy_spec(run: Run, task: Task) -> dict[str, Any]:
    spec = entropy_spec(run.entropy)
    if spec is None:
        raise RemoteContextError(
            f"node {task.node!r} takes a ctx, and its run uses the entropy source "
            f"{type(run.entropy).__name__}, which cannot be carried to another process; use "
            "SeededEntropy or SystemEntropy, or pass blocking=False to keep the node local",
            **run.where(task.node),
        )
    return spec


# --------------------------------------------------------------------------- worker


class _RemoteContext(RunContext):
    """The ctx of a node running in a worker: no store, no services, no interrupts."""

    __slots__ = ()

    def once(self, name: str, effect: Callable[[], Any]) -> Any:
        raise _NotRemote("ctx.once()")

    def record_call(self, kind: str, key: str, request: Any, call: Callable[[], Any]) -> Any:
        raise _NotRemote("ctx.record_call()")

    def interrupt(self, payload: Any = None) -> Any:
        raise _NotRemote("ctx.interrupt()")

    @property
    def services(self) -> Mapping[str, Any]:
        raise _NotRemote("ctx.services")

    @services.setter
    def services(self, value: Mapping[str, Any]) -> None:
        del value  # set by RunContext.__init__; a remote node has none


@functools.lru_cache(maxsize=256)
def _resolve(ref: str) -> Any:
    return resolve_ref(ref)


@functools.lru_cache(maxsize=64)
def _adapters(state_ref: str) -> tuple[type[BaseModel], dict[str, TypeAdapter[Any]]]:
    model = resolve_ref(state_ref)
    adapters: dict[str, TypeAdapter[Any]] = {
        name: TypeAdapter(Any if info.annotation is None else info.annotation)
        for name, info in model.model_fields.items()
    }
    return model, adapters


def run_remote(call: RemoteCall) -> dict[str, Any]:
    """Run one task in a worker process; the function every executor is given.

    Returns ``{"writes": <JSON>, "calls": [<journal entries>]}``, or ``{"error": exc}`` (with
    the traceback as text) when the node raised, or ``{"forbidden": what}`` when it used a
    part of ``ctx`` a worker does not have. Errors travel as values so that no executor wraps
    them (Ray would): the orchestrator re-raises the node's own exception.
    """
    journal: TaskJournal | None = None
    try:
        model, adapters = _adapters(call["state_ref"])
        values = {k: adapters[k].validate_python(v) for k, v in call["values"].items()}
        for key, value in call["payload"].items():
            values[key] = adapters[key].validate_python(value)
        state = fast_state(model, values)
        fn = _resolve(call["node_ref"])
        if call["takes_ctx"]:
            if call["journal"] is not None:
                from stargraph.checkpoint import JournalEntry

                journal = TaskJournal(
                    step=call["step"],
                    node=call["node"],
                    index=call["index"],
                    entries=[JournalEntry.model_validate(e) for e in call["journal"]],
                    persist=None,
                    run_id=call["run_id"],
                )
            ctx = _RemoteContext(
                run_id=call["run_id"],
                step=call["step"],
                node=call["node"],
                index=call["index"],
                path=tuple(call["path"]),
                config=call["config"],
                entropy=entropy_from_spec(call["entropy"]),
                journal=journal,
            )
            result = fn(state, ctx)
        else:
            result = fn(state)
        # A Command travels as its fields (a Send as node and payload), rebuilt by unpack.
        writes = to_jsonable_python(result)
        if isinstance(result, Command):
            writes = {_COMMAND: writes}
    except _NotRemote as signal:
        return {"forbidden": signal.what}
    except Exception as exc:
        return {"error": _portable(exc), "traceback": traceback.format_exc()}
    calls = [] if journal is None else journal.entries[: journal.seq]
    return {"writes": writes, "calls": [e.model_dump(mode="json") for e in calls]}


def _portable(exc: Exception) -> Exception:
    """The exception itself when it survives pickling, else a RuntimeError naming it."""
    # Imported here, in the worker process, when a node failed: a run in process never
    # pickles anything.
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(describe_exception(exc))
    return exc
