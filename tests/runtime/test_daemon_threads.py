"""The engine's worker pool: daemon threads, the Executor contract, bounded threads."""

from __future__ import annotations

import threading

import pytest

from stargraph.runtime._daemon import DaemonThreads
from stargraph.runtime._tasks import worker_threads

DEADLINE_S = 30.0


def test_the_shared_worker_pool_runs_tasks_on_daemon_threads() -> None:
    future = worker_threads().submit(threading.current_thread)
    thread = future.result(DEADLINE_S)
    assert thread.daemon
    assert thread.name.startswith("stargraph-worker_")


def test_results_and_exceptions_reach_the_future() -> None:
    pool = DaemonThreads(2, name="t")
    try:
        assert pool.submit(pow, 2, 10).result(DEADLINE_S) == 1024
        failed = pool.submit(int, "not a number")
        with pytest.raises(ValueError, match="not a number"):
            failed.result(DEADLINE_S)
        # A BaseException ends the task, not the thread: the next task still runs.
        stopped = pool.submit(_raise, KeyboardInterrupt())
        assert isinstance(stopped.exception(DEADLINE_S), KeyboardInterrupt)
        assert pool.submit(len, "abc").result(DEADLINE_S) == 3
    finally:
        pool.shutdown()


def _raise(exc: BaseException) -> None:
    raise exc


def test_threads_are_started_only_up_to_the_limit_and_reused() -> None:
    pool = DaemonThreads(2, name="bounded")
    release = threading.Event()
    started = threading.Barrier(3)

    def hold() -> str:
        started.wait(DEADLINE_S)
        release.wait(DEADLINE_S)
        return threading.current_thread().name

    try:
        held = [pool.submit(hold), pool.submit(hold)]
        started.wait(DEADLINE_S)  # both run, each on a thread of its own
        queued = pool.submit(lambda: threading.current_thread().name)
        # A thread is started inside submit(), so the count is final here.
        alive = [t.name for t in threading.enumerate() if t.name.startswith("bounded_")]
        assert sorted(alive) == ["bounded_0", "bounded_1"], "a thread past the limit"
        assert not queued.done()
        release.set()
        names = {f.result(DEADLINE_S) for f in held}
        assert names == {"bounded_0", "bounded_1"}
        assert queued.result(DEADLINE_S) in names  # a thread was reused, none added
        again = [pool.submit(lambda: threading.current_thread().name) for _ in range(20)]
        assert {f.result(DEADLINE_S) for f in again} <= names
    finally:
        release.set()
        pool.shutdown()


def test_shutdown_cancels_queued_work_and_refuses_more() -> None:
    pool = DaemonThreads(1, name="closing")
    release = threading.Event()
    entered = threading.Event()

    def hold() -> int:
        entered.set()
        release.wait(DEADLINE_S)
        return 1

    running = pool.submit(hold)
    assert entered.wait(DEADLINE_S)
    waiting = pool.submit(int, "2")  # queued behind hold(), which cannot end yet
    pool.shutdown(wait=False, cancel_futures=True)
    assert waiting.cancelled()
    release.set()
    pool.shutdown(wait=True)
    assert running.result(DEADLINE_S) == 1
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(int, "3")
    assert not any(t.name.startswith("closing_") for t in threading.enumerate())


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        DaemonThreads(0, name="none")
