"""The threads that run a step's tasks off the driver's thread: daemons, so that a process
never waits at exit for a node its run has already given up.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits, and
its threads are not daemons, so the exit waits for every task still running. That is
right for a pool whose work is wanted, and wrong for ours: a task is still running at exit
only when its run stopped at once (a second Ctrl-C under ``cancel_on_signals``, a
``KeyboardInterrupt`` or ``SystemExit`` raised mid-step, an ``asyncio`` task cancelled
mid-step) and gave its lease up; the step is dropped and runs again on resume. Waiting for
such a node (a model call, a sleep, a tool that blocks) kept a user's script alive after
it had printed that it stopped. :class:`DaemonThreads` is the same pool with daemon
threads that nothing joins at exit; a node cut there is a crash mid-step, which every
store already survives.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["DaemonThreads"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

_Work = tuple["concurrent.futures.Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreads(concurrent.futures.Executor):
    """A thread pool of daemon threads, started as work arrives and kept for the next.

    A thread is started for a submission when no thread is idle, up to ``max_workers``;
    past that, work waits in a queue, in the order submitted.
    """

    def __init__(self, max_workers: int, *, name: str) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, not {max_workers}")
        self._max = max_workers
        self._name = name
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one permit per thread waiting for work
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> concurrent.futures.Future[_T]:
        """Run ``fn(*args, **kwargs)`` on one of the pool's threads; its future."""
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name}: cannot take work after shutdown")
            self._queue.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        return future

    def _serve(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                self._queue.put(None)  # the next thread stops too
                return
            future, fn, args, kwargs = work
            del work  # the queue's reference only: the result may be large
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to whoever waits on the future
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more work; the threads end once the queued work is done (``wait``:
        wait for that; ``cancel_futures``: cancel the work not started yet instead)."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while True:
                    try:
                        work = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if work is not None:
                        work[0].cancel()
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                if thread is not threading.current_thread():
                    thread.join()
