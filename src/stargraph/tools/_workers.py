"""A tiny thread pool for running synchronous tool bodies under a timeout.

Why not ``concurrent.futures.ThreadPoolExecutor``: its submit/result round trip costs ~80 µs
here, which alone would blow the dispatch budget (under 100 µs per call); a
``SimpleQueue`` plus ``Event`` hand-off costs ~15 µs. The pool grows whenever no worker is
idle, because a timed-out body keeps its thread (Python threads cannot be killed) and must not
starve later calls; idle workers are reused. A caller that stops waiting for a job hands it a
callback (:meth:`WorkerPool.abandon`) that runs on the worker when the job really ends: the
arbiter releases the call's locks there.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal without its IntEnum conversions
import signal
import sys
import threading
from collections.abc import Callable
from queue import SimpleQueue
from types import FrameType
from typing import Any, Final

__all__ = ["Job", "WorkerPool", "alarm_available", "call_with_alarm"]


class Job:
    """One submitted call: :meth:`wait` for it, then read :meth:`result`."""

    __slots__ = ("_done", "_error", "_fn", "_late", "_notify", "_over", "_value")

    def __init__(self, fn: Callable[[], Any], notify: Callable[[], None] | None = None) -> None:
        self._fn = fn
        self._notify = notify
        self._value: Any = None
        self._error: BaseException | None = None
        self._late: Callable[[Job], None] | None = None
        self._over = False  # guarded by the pool's lock, like ``_late``
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

    @property
    def failed(self) -> bool:
        """Whether the finished function raised."""
        return self._error is not None

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

    def submit(self, fn: Callable[[], Any], notify: Callable[[], None] | None = None) -> Job:
        """Run ``fn`` on a worker thread; return its :class:`Job` at once.

        ``notify`` is called on the worker thread once the job is finished (an asyncio
        caller passes one that wakes its loop; it must not raise).
        """
        job = Job(fn, notify)
        with self._lock:
            if self._idle > 0:
                self._idle -= 1  # reserve that worker: it is (or will be) blocked in get()
                self._queue.put(job)
                return job
            self._count += 1
            name = f"{self._name}-{self._count}"
        threading.Thread(target=self._work, args=(job,), name=name, daemon=True).start()
        return job

    def abandon(self, job: Job, late: Callable[[Job], None]) -> bool:
        """The caller stops waiting for ``job``: call ``late(job)`` on the worker thread
        once the job really finishes. ``False`` (and no call) if it has finished already."""
        with self._lock:
            if job._over:
                return False
            job._late = late
            return True

    def _work(self, first: Job) -> None:
        job: Job | None = first
        while job is not None:
            job.run()
            # Book-keeping before waking the caller: once it is woken the caller wants
            # the GIL, and this thread should then only have to block in get().
            with self._lock:
                job._over = True
                late = job._late
                closed = self._closed
                if not closed and late is None:
                    self._idle += 1
            job._finish()
            if job._notify is not None:
                job._notify()
            if late is not None:
                late(job)  # the abandoned call's locks and audit record (must not raise)
                with self._lock:
                    closed = self._closed
                    if not closed:
                        self._idle += 1
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
_REARM_S: Final = 0.05
"""After the deadline the timer keeps firing at this interval until the body has stopped."""
_FORCE_AFTER: Final = 10
"""Firings a body may swallow before every line it runs raises (see :func:`call_with_alarm`)."""


_HAS_TIMER: Final = hasattr(signal, "setitimer")
_FREE: Final = (signal.SIG_DFL, None)
"""What ``getsignal`` gives for a SIGALRM nobody installed a handler for."""


def alarm_available() -> bool:
    """True on the main thread when SIGALRM is free (nobody installed a handler for it)."""
    # Asked at every inline dispatch: the main thread is told by its ident (current_thread()
    # is a Python-level lookup), the platform's timer and the free handlers read once.
    return (
        _HAS_TIMER
        and threading.get_ident() == threading.main_thread().ident
        and _signal.getsignal(_SIGALRM) in _FREE
    )


class _Alarm:
    """The state of one :func:`call_with_alarm`: armed until the body is over; ``fired``
    counts the firings past the deadline (any firing makes the outcome a timeout)."""

    __slots__ = ("armed", "fired", "previous_profile", "previous_trace", "traced")

    def __init__(self) -> None:
        self.armed = True
        self.fired = 0
        self.traced = False
        self.previous_trace: Any = None
        self.previous_profile: Any = None

    def on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if not self.armed:
            return  # a firing delivered after the body was over
        self.fired += 1
        if self.fired > _FORCE_AFTER:
            self._force(frame)
        raise _Deadline

    def _force(self, frame: FrameType | None) -> None:
        """Make every line the body runs raise, so no ``except BaseException`` (not even in
        nested loops) can absorb the deadline. A raising trace function is uninstalled by
        the interpreter, so a profile function (which never raises) puts it back."""
        # The body's frames are those below call_with_alarm's own (found by its code object,
        # not kept as a reference: a frame held by this state would make a reference cycle,
        # and garbage to collect, on every dispatch).
        body: list[FrameType] = []
        while frame is not None and frame.f_code is not _CALL_WITH_ALARM_CODE:
            body.append(frame)
            frame = frame.f_back
        if frame is None:
            return  # not running below call_with_alarm: never touch anyone else's frames
        for each in body:
            each.f_trace = self._on_line
            each.f_trace_lines = True
        if not self.traced:
            self.previous_trace, self.previous_profile = sys.gettrace(), sys.getprofile()
            self.traced = True
        sys.settrace(self._on_call)
        sys.setprofile(self._on_profile)

    def _on_call(self, frame: FrameType, event: str, arg: object) -> Any:
        return self._on_line if self.armed else None

    def _on_line(self, frame: FrameType, event: str, arg: object) -> Any:
        if self.armed and event == "line":
            raise _Deadline
        return self._on_line if self.armed else None

    def _on_profile(self, frame: FrameType, event: str, arg: object) -> None:
        if self.armed and sys.gettrace() is None:
            sys.settrace(self._on_call)

    def restore(self) -> None:
        """Disarm the timer and put back what the escalation replaced."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        if self.traced:
            sys.setprofile(self.previous_profile)
            sys.settrace(self.previous_trace)


def call_with_alarm(fn: Callable[[], Any], timeout: float) -> Any:
    """Run ``fn`` on this (main) thread, interrupted with ``TimeoutError`` at ``timeout``.

    Why: handing a body to a worker thread costs one thread wake-up each way (measured 15 to
    80 µs on this kind of VM), most of a dispatch's budget; and a worker cannot stop a body
    that overruns, while the interval timer can (the handler raises inside the body, even in
    a blocking call such as ``time.sleep``). Only for Python bodies: a subprocess tool keeps
    its own deadline and must not be interrupted halfway through reaping its child.

    The deadline holds against a body that catches ``BaseException``:

    * once it passed, the outcome is ``TimeoutError`` even if the body then returns a value
      or raises something else;
    * the timer keeps firing every 50 ms, raising again each time, so a body that swallows
      the first interruption is interrupted again wherever it is (a blocking call included);
    * after 10 such firings (0.5 s past the deadline) every line the body executes raises,
      so even nested swallowing loops unwind. This last resort also cuts short ``finally``
      and ``__exit__`` code of the body, which by then has had half a second to clean up.

    What no timer can stop is a body stuck inside one C call that never returns to the
    interpreter (a huge regex match, a native extension loop).
    """
    state = _Alarm()
    previous = _signal.signal(_SIGALRM, state.on_alarm)
    value: Any = None
    error: BaseException | None = None
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout, _REARM_S)
            value = fn()
        except BaseException as exc:  # re-raised below unless the deadline passed
            error = exc
        finally:
            # First thing: from here on a firing returns without raising and the trace
            # function stands down. A firing before this line raises into the except below.
            state.armed = False
    except _Deadline:
        pass  # a firing raced the end of the body; ``fired`` already records it
    finally:
        state.restore()
        _signal.signal(_SIGALRM, previous)
    if state.fired:
        raise TimeoutError(f"timed out after {timeout}s") from None
    if error is not None:
        raise error
    return value


_CALL_WITH_ALARM_CODE: Final = call_with_alarm.__code__
