"""Executing one step's tasks: inline, on threads or on asyncio; retries, timeouts, interrupts.

A lone task runs on the driver's thread. Several run concurrently: sync ones on the graph's
worker threads, shared by work stealing with the driver (``_Batch``), ``inline`` ones on the
driver's thread; async ones on the running loop (``ainvoke``) or the run's own loop (a sync
driver, see ``_loop``). Whatever runs where, the result is the same list of
``(task, writes)`` pairs, merged later in ``(node, index)`` order. Tasks whose writes were
saved before a crash (``run.done``) are not run again. In a step of several tasks, each
finished task's writes are saved at once as pending writes, so a crash of a sibling does
not cost the finished ones.

With ``compile(executor=...)``, the ``blocking`` sync tasks of a step of several tasks run on
that executor (another process or machine) through ``_remote``: the worker only computes the
writes; retries, timeouts, validation, journaling and checkpoints stay here.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, Protocol

from stargraph._threads import LazyDaemon
from stargraph.errors import MissingServiceError, NodeTimeoutError, RunError, StargraphError
from stargraph.refs import resolve_ref
from stargraph.runtime._context import AttemptFence, GraphInterrupt
from stargraph.runtime._daemon import DaemonThreads
from stargraph.runtime._plan import NodeSpec, Task, by_task
from stargraph.runtime._remote import Remote
from stargraph.runtime._run import Run

__all__ = [
    "WORKER_THREADS",
    "Handoff",
    "LocalRunner",
    "StepOutcome",
    "TaskRunner",
    "execute_async",
    "execute_sync",
    "worker_threads",
]

WORKER_THREADS = 64
"""Threads the process's worker pool may start; steps of several tasks share them."""


class _SharedPool:
    """The process's worker pool, started on first use."""

    __slots__ = ("lock", "pool")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: DaemonThreads | None = None

    def get(self) -> DaemonThreads:
        pool = self.pool
        if pool is None:
            with self.lock:
                pool = self.pool
                if pool is None:
                    pool = self.pool = DaemonThreads(WORKER_THREADS, name="stargraph-worker")
        return pool

    def forget(self) -> None:
        # A forked child has none of its parent's threads: it starts a pool of its own.
        self.lock = threading.Lock()
        self.pool = None


_SHARED = _SharedPool()
os.register_at_fork(after_in_child=_SHARED.forget)


def worker_threads() -> concurrent.futures.Executor:
    """The process's worker threads, shared by every compiled graph (started on first use;
    daemons, so that an exit never waits for a task its run gave up)."""
    return _SHARED.get()


TaskResult = tuple[Task, dict[str, Any]]

Outcome = tuple[dict[str, Any] | None, BaseException | None]
"""What one task of a batch came to: its writes, or what it raised."""

_PATIENCE = 0.0002
"""Seconds a new worker watches the other runners take tasks before it takes one itself."""

_TICK = 0.001
"""Seconds between two looks of the watchdog at the batches in flight."""

_IDLE_TICKS = 50
"""Looks without a batch in flight after which the watchdog sleeps until the next one."""
Pool = Callable[[], concurrent.futures.Executor]


class StepOutcome(NamedTuple):
    """What a step produced: the finished tasks' writes, and the interrupts that stopped it
    (every task that interrupted, in task order; ``None`` when none did)."""

    results: list[TaskResult]
    interrupt: list[tuple[Task, GraphInterrupt]] | None = None


class TaskRunner(Protocol):
    """Runs the tasks of one step of a run and reports what they produced; the step loop
    merges and commits it. :class:`LocalRunner` runs them (in this process, or blocking ones
    on the graph's executor); a replay's runner serves them from the record."""

    def run_step(self, run: Run, tasks: Sequence[Task]) -> StepOutcome:
        """Run ``tasks`` (the step ``run.step``) and return their outcome, in task order."""
        ...


class LocalRunner:
    """The live runner: a lone task on the caller's thread, several concurrently (sync ones
    on ``pool``'s threads, ``inline`` ones on the caller's, async ones on the run's loop),
    blocking ones of a fan-out on ``remote`` when the graph has an executor."""

    __slots__ = ("pool", "remote")

    def __init__(self, pool: Pool, remote: Remote | None = None) -> None:
        self.pool = pool
        self.remote = remote

    def run_step(self, run: Run, tasks: Sequence[Task]) -> StepOutcome:
        """:func:`execute_sync`: the step from synchronous code."""
        return execute_sync(run, tasks, self.pool, self.remote)

    async def arun_step(self, run: Run, tasks: Sequence[Task]) -> StepOutcome:
        """:func:`execute_async`: the step on the running event loop."""
        return await execute_async(run, tasks, self.pool, self.remote)

    def run_here(self, run: Run, tasks: Sequence[Task]) -> StepOutcome | None:
        """For the async driver: a step whose tasks are all sync and do not block, run
        right now exactly as invoke runs it (a lone task on the loop's thread, several in
        the work-stealing batch that the loop's thread takes part in; nothing else of the
        run waits meanwhile); ``None`` for any other step (an async, ``blocking`` or timed
        task), to await :meth:`arun_step` for.

        The loop's thread is held while the step runs: a sync node that blocks (on I/O, a
        lock, a sleep) says so with ``blocking=True`` and then runs on a worker thread."""
        specs = run.plan.specs
        for task in tasks:
            spec = specs[task.node]
            if spec.is_async or spec.blocking or spec.timeout_s:
                return None
        return execute_sync(run, tasks, self.pool, self.remote)


def _retry_classes(spec: NodeSpec) -> tuple[type[BaseException], ...]:
    assert spec.retry is not None
    return tuple(resolve_ref(ref) for ref in spec.retry.retry_on)


def _should_retry(spec: NodeSpec, exc: BaseException, attempt: int) -> bool:
    policy = spec.retry
    if policy is None or attempt >= policy.max_attempts:
        return False
    return isinstance(exc, _retry_classes(spec))


def _backoff(run: Run, spec: NodeSpec, attempt: int) -> float:
    policy = spec.retry
    assert policy is not None
    delay = min(policy.initial_interval_s * policy.backoff ** (attempt - 1), policy.max_interval_s)
    if policy.jitter:
        # Jitter comes from the run's entropy source, so a seeded run retries identically.
        delay *= 0.5 + run.entropy.random()
    return float(delay)


def _timeout(run: Run, task: Task, spec: NodeSpec) -> RunError:
    return NodeTimeoutError(
        f"node {task.node!r} exceeded its timeout of {spec.timeout_s}s at step {run.step} of "
        f"run {run.run_id!r}; raise timeout_s or make the node faster",
        **run.where(task.node),
    )


def _call_with_timeout(fn: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
    # A daemon thread per call: Python cannot stop a running function, so on timeout the
    # thread is abandoned (and its result ignored) rather than blocking a shared pool. The
    # caller then revokes the attempt's ctx, so the thread can make no journaled effect.
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="stargraph-timeout")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"timed out after {timeout}s")
    if "error" in box:
        raise box["error"]
    return box["result"]


def _retry_delay(
    run: Run, task: Task, spec: NodeSpec, exc: Exception, *, attempt: int, args: tuple[Any, ...]
) -> float:
    """Attempt ``attempt`` (called with ``args``) raised ``exc``: revoke its ctx, then give
    the backoff before the next attempt when ``exc`` is retried, or raise the typed error (a
    timeout, or the node's failure with ``exc`` as its cause). Shared by the sync and async
    loops, which differ only in how they call and wait."""
    run.abandon_attempt(args)
    if _should_retry(spec, exc, attempt):
        return _backoff(run, spec, attempt)
    if isinstance(exc, TimeoutError) and spec.timeout_s:
        raise _timeout(run, task, spec) from exc
    raise run.node_failed(task, exc) from exc


def _finish(
    run: Run,
    task: Task,
    writes: dict[str, Any],
    *,
    fence: AttemptFence | None,
    attempt: int,
    siblings: int,
) -> None:
    """The task succeeded at attempt ``attempt``: refuse late records of abandoned attempts,
    note the attempts taken and, in a step of several tasks, save its writes at once."""
    if fence is not None:
        fence.seal()
    if attempt > 1:
        run.attempts[f"{task.node}/{task.index}"] = attempt
    if siblings > 1 and run.persistence is not None:
        run.persistence.put_pending(run, task, writes)


def run_task_sync(
    run: Run, task: Task, spec: NodeSpec, siblings: int, *, remote: Remote | None = None
) -> dict[str, Any]:
    """Run one task to completion on this thread (or, with ``remote``, on the graph's
    executor while this thread waits), with its retry policy and timeout.

    Every attempt gets its own ctx; a failed or timed-out one is revoked before the next
    starts (a timed-out thread may still run: see ``AttemptFence``)."""
    fence = _fence(spec)
    attempt = 1
    args = run.call_args(task, spec, fence)
    while True:
        try:
            if remote is not None:
                result = remote.call(run, task, spec, args)
            elif spec.timeout_s:
                result = _call_with_timeout(spec.fn, args, spec.timeout_s)
            else:
                result = spec.fn(*args)
            writes = run.validate_writes(task, result)
            break
        except MissingServiceError as exc:  # raised by the services mapping, unlocated
            raise run.node_failed(task, exc) from None
        except (GraphInterrupt, StargraphError):
            raise
        except Exception as exc:
            time.sleep(_retry_delay(run, task, spec, exc, attempt=attempt, args=args))
            attempt += 1
            args = run.call_args(task, spec, fence, attempt)
    _finish(run, task, writes, fence=fence, attempt=attempt, siblings=siblings)
    return writes


async def run_task_async(
    run: Run,
    task: Task,
    spec: NodeSpec,
    siblings: int,
    pool: Pool,
    *,
    remote: Remote | None = None,
) -> dict[str, Any]:
    """Run one task on the running event loop (sync bodies on a thread when they block, or
    on the graph's executor with ``remote``)."""
    loop = asyncio.get_running_loop()
    # An async body is cancelled at its timeout (wait_for waits for it to stop), so only sync
    # bodies on the pool can outlive an attempt; their attempts share a fence.
    fence = None if spec.is_async else _fence(spec)
    attempt = 1
    args = run.call_args(task, spec, fence)
    while True:
        try:
            if remote is not None:
                awaitable: Awaitable[Any] = remote.acall(run, task, spec, args)
            elif spec.is_async:
                awaitable = spec.fn(*args)
            else:
                awaitable = loop.run_in_executor(pool(), _call, spec.fn, args)
            if spec.timeout_s:
                result = await asyncio.wait_for(awaitable, spec.timeout_s)
            else:
                result = await awaitable
            writes = run.validate_writes(task, result)
            break
        except MissingServiceError as exc:  # raised by the services mapping, unlocated
            raise run.node_failed(task, exc) from None
        except (GraphInterrupt, StargraphError):
            raise
        except Exception as exc:
            await asyncio.sleep(_retry_delay(run, task, spec, exc, attempt=attempt, args=args))
            attempt += 1
            args = run.call_args(task, spec, fence, attempt)
    _finish(run, task, writes, fence=fence, attempt=attempt, siblings=siblings)
    return writes


def _fence(spec: NodeSpec) -> AttemptFence | None:
    """A fence for a task whose attempts may overlap: a node with a timeout and a ctx."""
    return AttemptFence() if spec.timeout_s and spec.takes_ctx else None


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return fn(*args)


def _inline(spec: NodeSpec) -> bool:
    """Sync nodes marked ``inline=True`` run on the driver's own thread, in task order."""
    return spec.inline and not spec.is_async


def _remote(run: Run, tasks: Sequence[Task], remote: Remote | None) -> Remote | None:
    """The graph's executor when this step's blocking tasks go to it (see ``_remote``)."""
    return None if remote is None else remote.for_step(run, tasks)


def _on(remote: Remote | None, spec: NodeSpec) -> Remote | None:
    return remote if remote is not None and remote.handles(spec) else None


class _Watchdog:
    """Asks for a batch's first worker thread once its runners stall.

    Waking a thread for a step costs more than a step of tiny tasks (a Future, a wake-up
    and the GIL changing hands twice), so the driver starts a batch alone. One daemon
    thread per process looks at the batches in flight every :data:`_TICK` and asks for a
    worker for each one whose runners took no task since its last look (the driver is
    stuck in a task that blocks); from there each worker asks for the next (see
    :class:`_Batch`). A step of pure functions is over before the watchdog's next look and
    wakes no thread; after :data:`_IDLE_TICKS` looks at no batch that wants looking at
    (a :class:`Handoff` without a step offered does not), the watchdog sleeps until one
    starts or a handoff offers a step.
    """

    __slots__ = ("active", "daemon", "sleeping", "wake")

    def __init__(self) -> None:
        self.active: dict[int, _Batch | Handoff] = {}
        self.wake = threading.Event()
        # Set before the watchdog sleeps: an offer reads it, rather than calling is_set.
        self.sleeping = False
        self.daemon = LazyDaemon(self._loop, name="stargraph-watchdog")

    def watch(self, batch: _Batch | Handoff) -> None:
        """Look after ``batch`` until :meth:`forget`."""
        self.active[id(batch)] = batch
        if not self.wake.is_set():
            if self.daemon.thread is None:
                self.daemon.start()
            self.wake.set()

    def forget(self, batch: _Batch | Handoff) -> None:
        """``batch`` has no task left to hand out: it needs no more workers."""
        self.active.pop(id(batch), None)

    def _wanted(self) -> bool:
        return any(batch.wanted() for batch in list(self.active.values()))

    def _loop(self) -> None:
        idle = 0
        while True:
            if self._wanted():
                idle = 0
            else:
                idle += 1
                if idle >= _IDLE_TICKS:
                    self.sleeping = True
                    self.wake.clear()
                    # watch() sets the flag after adding its batch, an offer after making
                    # its step claimable: either this sees it, or the flag is set again.
                    if not self._wanted():
                        self.wake.wait()
                    self.sleeping = False
                    idle = 0
            time.sleep(_TICK)
            for batch in list(self.active.values()):
                batch.look()

    def reset(self) -> None:
        # A forked child has no watchdog thread: it starts its own on first need.
        self.active = {}
        self.wake = threading.Event()
        self.daemon.after_fork()


_WATCHDOG = _Watchdog()
os.register_at_fork(after_in_child=_WATCHDOG.reset)


class Handoff:
    """The steps of an events stream whose start (``node_started``) the driver handed the
    consumer before they run: the driver runs each when the consumer comes back for more
    (on the consumer's thread, as invoke would), or a worker thread does once the consumer
    stayed away for a look of the watchdog, so that the nodes run while the consumer is
    busy elsewhere. Either way a step runs once. One per run, watched from its making to
    :meth:`close`; it wants looking at only from an :meth:`offer` to its :meth:`take`, so
    that the watchdog sleeps while steps run, and a step costs a lock's release and
    acquire."""

    __slots__ = ("claim", "looked", "offered", "outcome", "remote", "run", "tasks")

    def __init__(self, run: Run, remote: Remote | None) -> None:
        self.run = run
        self.remote = remote
        # Whoever acquires it runs the offered step; held while no step is offered.
        self.claim = threading.Lock()
        self.claim.acquire()
        self.tasks: Sequence[Task] = ()
        # Serial of the step offered last, and the one the watchdog saw at its last look:
        # one look's grace, since a consumer that reads on is back long before the second.
        self.offered = 0
        self.looked = 0
        # Made by the watchdog just before its claim: the way back of a step a worker runs.
        self.outcome: concurrent.futures.Future[StepOutcome] | None = None
        _WATCHDOG.watch(self)

    def offer(self, tasks: Sequence[Task]) -> None:
        """``tasks`` (the step whose start was handed on) may run now, here or on a worker."""
        self.tasks = tasks
        self.offered += 1
        self.claim.release()
        if _WATCHDOG.sleeping:
            _WATCHDOG.wake.set()

    def wanted(self) -> bool:
        """Whether a step is offered (the watchdog stays awake for it)."""
        return not self.claim.locked()

    def look(self) -> None:
        """The watchdog's look: at the second at one offer, the consumer is away; a worker
        runs the step."""
        if self.claim.locked():  # no step offered (or it is running)
            return
        if self.offered != self.looked:
            self.looked = self.offered
            return
        # Nothing else assigns it while the claim is held: the driver, failing to claim,
        # finds the future of the claim that won.
        outcome = self.outcome = concurrent.futures.Future()
        if self.claim.acquire(blocking=False):
            try:
                worker_threads().submit(self._on_worker, outcome)
            except RuntimeError:  # the pool is shutting down: the driver runs it on return
                self.claim.release()

    def _on_worker(self, outcome: concurrent.futures.Future[StepOutcome]) -> None:
        try:
            done = execute_sync(self.run, self.tasks, worker_threads, self.remote)
        except BaseException as exc:  # handed to the driver, which raises it
            outcome.set_exception(exc)
        else:
            outcome.set_result(done)

    def take(self) -> StepOutcome:
        """The offered step's outcome: run here unless a worker started it, then waited for."""
        if self.claim.acquire(blocking=False):
            return execute_sync(self.run, self.tasks, worker_threads, self.remote)
        assert self.outcome is not None  # made before the watchdog took the claim
        return self.outcome.result()

    def close(self) -> None:
        """The run's stream ended: nothing more to look at."""
        _WATCHDOG.forget(self)


class _Batch:
    """The thread-run tasks of one step, shared by the driver and the worker threads.

    Work stealing: every runner (the driver's thread and each worker) takes the next task
    until none is left. The driver starts alone; when it stalls in a task with others still
    waiting, the watchdog asks for a worker (see :class:`_Watchdog`), and each worker,
    before its first task, makes sure one more runner is on its way while tasks wait (one
    at a time: a worker asked for and not started yet is enough). Tiny tasks are then all
    run by the driver without waking a thread (a fan-out of pure functions costs about
    what it did inline), while tasks that block each end up on a thread of their own and
    overlap.
    """

    __slots__ = (
        "finished",
        "limit",
        "lock",
        "outcomes",
        "pool",
        "queue",
        "remaining",
        "remote",
        "run",
        "seen",
        "siblings",
        "spawned",
        "starting",
        "taken",
    )

    def __init__(
        self,
        run: Run,
        tasks: list[Task],
        *,
        siblings: int,
        pool: Pool,
        remote: Remote | None,
        limit: int,
    ) -> None:
        self.run = run
        # (position, task): a runner files the task's outcome at its position.
        self.queue = collections.deque(enumerate(tasks))
        self.siblings = siblings
        self.pool = pool
        self.remote = remote
        self.lock = threading.Lock()
        # Held until the last task's outcome is filed (released by whichever runner files
        # it): a lock is several times cheaper to make and to wait on than an Event.
        self.finished = threading.Lock()
        self.finished.acquire()
        self.remaining = len(tasks)
        self.outcomes: list[Outcome | None] = [None] * len(tasks)
        # Worker threads to ask for at most: the driver itself is a runner too.
        self.limit = limit
        self.spawned = 0
        self.starting = 0  # workers asked for that have not started taking tasks yet
        self.taken = 0  # tasks taken so far, by any runner: progress a worker can watch
        self.seen = 0  # ``taken`` at the watchdog's last look

    def wanted(self) -> bool:
        """A batch in flight always wants the watchdog's looks."""
        return True

    def look(self) -> None:
        """The watchdog's look: a runner is stuck if none took a task since the last one."""
        taken = self.taken
        if self.queue and taken == self.seen:
            self.spawn()
        self.seen = taken

    def spawn(self) -> None:
        with self.lock:
            if self.spawned >= self.limit or self.starting:
                return
            self.spawned += 1
            self.starting += 1
        try:
            self.pool().submit(self.work, True)
        except RuntimeError:
            # The pool is shutting down (close(), interpreter exit): the runners already at
            # work take the remaining tasks, one after another.
            with self.lock:
                self.starting -= 1

    def work(self, worker: bool = False) -> None:
        """Run tasks until none is left (on the driver's thread or, ``worker``, a pool's)."""
        if worker:
            with self.lock:
                self.starting -= 1
            # While the runners already at work keep taking tasks, leave the tasks to them:
            # a worker only steps in when they stall (a task that blocks). Tiny tasks are
            # then all run by the driver, and no result crosses threads.
            seen = -1
            while self.queue and self.taken != seen:
                seen = self.taken
                time.sleep(_PATIENCE)
        run, siblings, remote, queue, outcomes = (
            self.run,
            self.siblings,
            self.remote,
            self.queue,
            self.outcomes,
        )
        specs = run.plan.specs
        # A finished task's writes are saved at once as pending writes (see the module doc).
        persistence = run.persistence
        pending = persistence.put_pending if siblings > 1 and persistence is not None else None
        # The driver leaves asking for the first worker to the watchdog; each worker asks
        # for a successor before its first task, so while tasks wait one more runner is on
        # its way or at work.
        first = worker
        ran = 0
        while True:
            try:
                position, task = queue.popleft()
            except IndexError:
                break
            self.taken += 1
            if first:
                first = False
                if queue and not self.starting:
                    self.spawn()
            spec = specs[task.node]
            try:
                if spec.plain and remote is None:
                    # As for a lone task: no retry or timeout machinery to go through.
                    writes = _plain(run, task, spec)
                    if pending is not None:
                        pending(run, task, writes)
                else:
                    writes = run_task_sync(run, task, spec, siblings, remote=_on(remote, spec))
                outcomes[position] = (writes, None)
            except (Exception, GraphInterrupt) as exc:  # sorted out in task order below
                outcomes[position] = (None, exc)
            except BaseException as exc:
                if not worker:
                    raise  # Ctrl-C on the driver's thread stops the run at once
                outcomes[position] = (None, exc)  # on a worker: the driver raises it
            ran += 1
        # One count per runner rather than per task: the step is over when every task taken
        # has its outcome filed. A runner that took none cannot be the one that ends it (and
        # must not release the lock a second time).
        with self.lock:
            self.remaining -= ran
            if ran and self.remaining == 0:
                self.finished.release()


_outcome = StepOutcome._make  # the tuple built directly: no Python-level __new__ per step


def _plain(run: Run, task: Task, spec: NodeSpec) -> dict[str, Any]:
    """Call a plain node (sync, no retry policy, timeout or executor) and check its writes."""
    try:
        args = (run.task_state(task),) if spec.bare else run.call_args(task, spec)
        result = spec.fn(*args)
    except MissingServiceError as exc:  # raised by the services mapping, unlocated
        raise run.node_failed(task, exc) from None
    except (GraphInterrupt, StargraphError):
        raise
    except Exception as exc:
        raise run.node_failed(task, exc) from exc
    return run.validate_writes(task, result)


def execute_sync(
    run: Run, tasks: Sequence[Task], pool: Pool, remote: Remote | None = None
) -> StepOutcome:
    """Run a step's tasks from synchronous code.

    One plain task runs right here. Several run concurrently: sync ones on the pool's
    threads (``inline`` ones here, in task order), async ones on the run's event loop.
    Whatever finishes first, the outcome lists the tasks in task order.
    """
    specs = run.plan.specs
    if len(tasks) == 1 and not run.done:
        task = tasks[0]
        spec = specs[task.node]
        if spec.plain:
            # Chains and loops: one plain sync node, no retry policy or timeout - call it
            # right here (the retry/timeout machinery costs a measurable share of a step).
            try:
                return _outcome(([(task, _plain(run, task, spec))], None))
            except GraphInterrupt as signal:
                return StepOutcome([], [(task, signal)])
        if not spec.is_async:
            try:
                return StepOutcome([(task, run_task_sync(run, task, spec, 1))])
            except GraphInterrupt as signal:
                return StepOutcome([], [(task, signal)])
    done = run.done
    todo = [t for t in tasks if t.key not in done] if done else list(tasks)
    plan = run.plan
    if plan.any_async and any(specs[t.node].is_async for t in todo):
        # The whole step on the run's one loop: async tasks as coroutines, sync ones on
        # the pool's threads through it.
        return run.event_loop().run(execute_async(run, tasks, pool, remote))
    results: list[TaskResult] = [(t, done[t.key]) for t in tasks if t.key in done] if done else []
    interrupts: list[tuple[Task, GraphInterrupt]] = []
    if plan.any_inline:
        here = [t for t in todo if _inline(specs[t.node])]
        shared = [t for t in todo if not _inline(specs[t.node])]
    else:
        here, shared = [], todo
    batch = None
    if shared:
        # With tasks of its own to run first, the driver joins the batch late: then every
        # shared task may need a worker of its own.
        limit = len(shared) if here else len(shared) - 1
        batch = _Batch(
            run,
            shared,
            siblings=len(tasks),
            pool=pool,
            remote=_remote(run, tasks, remote),
            limit=limit,
        )
        if here:
            batch.spawn()
        _WATCHDOG.watch(batch)
    try:
        for task in here:
            try:
                results.append((task, run_task_sync(run, task, specs[task.node], len(tasks))))
            except GraphInterrupt as signal:
                interrupts.append((task, signal))
        if batch is not None:
            batch.work()
    finally:
        if batch is not None:
            _WATCHDOG.forget(batch)
    if batch is not None:
        batch.finished.acquire()
        for task, outcome in zip(shared, batch.outcomes, strict=True):
            assert outcome is not None
            writes, error = outcome
            if isinstance(error, GraphInterrupt):
                interrupts.append((task, error))
            elif error is not None:
                # The first failure in task order, whichever failed first in time.
                raise error
            else:
                assert writes is not None
                results.append((task, writes))
    if done:
        # Tasks that finished before a crash or an interrupt come first above: put them back
        # in task order, so that the step reads as it does when run (or replayed) whole.
        results.sort(key=by_task)
    return StepOutcome(results, _in_order(interrupts))


async def execute_async(
    run: Run, tasks: Sequence[Task], pool: Pool, remote: Remote | None = None
) -> StepOutcome:
    """Run a step's tasks on the running event loop: async ones as coroutines, sync ones on
    the pool's threads (``inline`` ones, and a lone plain one when nobody streams the run,
    on the loop's thread)."""
    specs = run.plan.specs
    feed = run.feed
    results: list[TaskResult] = [(t, run.done[t.key]) for t in tasks if t.key in run.done]
    todo = [t for t in tasks if t.key not in run.done]
    interrupts: list[tuple[Task, GraphInterrupt]] = []
    remote = _remote(run, tasks, remote)
    alone = len(todo) == 1 and (feed is None or not (feed.live or feed.watched))

    def on_loop(spec: NodeSpec) -> bool:
        if spec.is_async:
            return False
        return spec.inline or (alone and not spec.blocking and not spec.timeout_s)

    pending = [
        (
            t,
            asyncio.ensure_future(
                run_task_async(
                    run, t, specs[t.node], len(tasks), pool, remote=_on(remote, specs[t.node])
                )
            ),
        )
        for t in todo
        if not on_loop(specs[t.node])
    ]
    try:
        for task in todo:
            if on_loop(specs[task.node]):
                try:
                    results.append((task, run_task_sync(run, task, specs[task.node], len(tasks))))
                except GraphInterrupt as signal:
                    interrupts.append((task, signal))
        for task, fut in pending:
            try:
                results.append((task, await fut))
            except GraphInterrupt as signal:
                interrupts.append((task, signal))
    except BaseException:
        for _, fut in pending:
            fut.cancel()
        await asyncio.gather(*(f for _, f in pending), return_exceptions=True)
        raise
    if run.done:
        results.sort(key=by_task)  # as in execute_sync
    return StepOutcome(results, _in_order(interrupts))


def _in_order(
    interrupts: list[tuple[Task, GraphInterrupt]],
) -> list[tuple[Task, GraphInterrupt]] | None:
    # Several tasks may interrupt in one step: the run waits on all of them, listed in task
    # order (not in finishing order) so that the record does not depend on thread timing.
    return sorted(interrupts, key=lambda pair: pair[0].key) if interrupts else None
