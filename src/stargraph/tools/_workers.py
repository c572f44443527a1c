"""A tiny thread pool for running synchronous tool bodies under a timeout.

Why not ``concurrent.futures.ThreadPoolExecutor``: its submit/result round trip costs ~80 µs
here, which alone would blow the dispatch budget (issue 6 asks for < 100 µs per call); a
``SimpleQueue`` plus ``Event`` hand-off costs ~15 µs. The pool grows whenever no worker is
idle, because a timed-out body keeps its thread (Python threads cannot be killed) and must not
starve later calls; idle workers are reused.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal without its IntEnum conversions
import signal
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, Final

__all__ = ["Job", "WorkerPool", "alarm_available", "call_with_alarm"]


class Job:
    """One submitted call: :meth:`wait` for it, then read :meth:`result`."""

    __slots__ = ("_done", "_error", "_fn", "_value")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._value: Any = None
        self._error: BaseException | None = None
        # A bare lock held until the job finishes: cheaper to wait on than an Event
        # (no Condition, no per-wait waiter lock), and only one thread ever waits.
        self._done = threading.Lock()
        self._done.acquire()

    def wait(self, timeout: float) -> bool:
        """Block until the job finished or ``timeout`` passed; ``True`` if it finished."""
        if self._done.acquire(timeout=timeout):
            self._done.release()  # keep "finished" observable for a second wait
            return True
        return False

    def _finish(self) -> None:
        self._done.release()

    def run(self) -> None:
        """Run the function, capturing its value or exception (``done`` is set separately)."""
        try:
            self._value = self._fn()
        except BaseException as exc:  # re-raised in the caller's thread by result()
            self._error = exc

    def result(self) -> Any:
        """The value, or re-raise the exception, of a finished job."""
        if self._error is not None:
            raise self._error
        return self._value


class WorkerPool:
    """Daemon worker threads fed through a queue; one idle worker is reserved per job."""

    def __init__(self, name: str = "stargraph-tool") -> None:
        self._name = name
        self._queue: SimpleQueue[Job | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0
        self._closed = False

    def submit(self, fn: Callable[[], Any]) -> Job:
        """Run ``fn`` on a worker thread; return its :class:`Job` at once."""
        job = Job(fn)
        with self._lock:
            if self._idle > 0:
                self._idle -= 1  # reserve that worker: it is (or will be) blocked in get()
                self._queue.put(job)
                return job
            self._count += 1
            name = f"{self._name}-{self._count}"
        threading.Thread(target=self._work, args=(job,), name=name, daemon=True).start()
        return job

    def _work(self, first: Job) -> None:
        job: Job | None = first
        while job is not None:
            job.run()
            # Book-keeping before waking the caller: once it is woken the caller wants
            # the GIL, and this thread should then only have to block in get().
            with self._lock:
                closed = self._closed
                if not closed:
                    self._idle += 1
            job._finish()
            job = None  # drop the reference before blocking, so results can be collected
            if closed:
                return
            job = self._queue.get()

    def shutdown(self) -> None:
        """Stop idle workers; busy ones exit after their current job."""
        with self._lock:
            idle, self._idle = self._idle, 0
            self._closed = True
        for _ in range(idle):
            self._queue.put(None)


class _Deadline(BaseException):
    """Raised by the SIGALRM handler inside a body past its deadline. A BaseException, so a
    body's own ``except Exception`` cannot swallow it."""


# Read once: every inline dispatch installs and restores the handler, and signal.signal's
# enum conversions cost about as much as the rest of that (~3 µs per dispatch).
_SIGALRM: Final = int(signal.SIGALRM)


def alarm_available() -> bool:
    """True on the main thread when SIGALRM is free (nobody installed a handler for it)."""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and _signal.getsignal(_SIGALRM) in (signal.SIG_DFL, None)
    )


def call_with_alarm(fn: Callable[[], Any], timeout: float) -> Any:
    """Run ``fn`` on this (main) thread, interrupted with ``TimeoutError`` at ``timeout``.

    Why: handing a body to a worker thread costs one thread wake-up each way (measured 15 to
    80 µs on this kind of VM), most of a dispatch's budget; and a worker cannot stop a body
    that overruns, while the interval timer can (the handler raises inside the body, even in
    a blocking call such as ``time.sleep``). Only for Python bodies: a subprocess tool keeps
    its own deadline and must not be interrupted halfway through reaping its child.
    """

    def on_alarm(signum: int, frame: object) -> None:
        raise _Deadline

    previous = _signal.signal(_SIGALRM, on_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                return fn()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Deadline:
            raise TimeoutError(f"timed out after {timeout}s") from None
    finally:
        _signal.signal(_SIGALRM, previous)
