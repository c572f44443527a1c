"""Stopping a run before its end: cancellation at a step boundary, and signals.

Besides finishing, being interrupted and failing, a run can stop in two ways:

- **Cancelled.** Asked to stop - by :meth:`CompiledGraph.cancel`, by a first SIGINT (Ctrl-C)
  or SIGTERM inside :func:`cancel_on_signals`, or by its consumer closing its event stream -
  the run lets the step in flight finish and commit, and stops before the next one. Its store
  keeps it as ``cancelled`` at that step (``stopped_by`` says what cancelled it) and its lease
  is released; ``invoke``/``resume``/``stream`` raise
  :class:`~stargraph.errors.RunCancelledError`, and ``resume(run_id)`` continues it to the
  result an uninterrupted run reaches. Cancelling a run cancels the nested runs of its
  subgraph nodes too (the innermost stops first, and its parent with it). An ``asyncio`` task
  running ``ainvoke``/``aresume`` that is cancelled stops where it awaits: its step in flight
  is dropped (finished siblings' writes are kept), the run is marked ``cancelled`` at its last
  committed step, and ``CancelledError`` propagates as asyncio expects.
- **Stopped at once.** A second signal inside :func:`cancel_on_signals` (or any
  ``KeyboardInterrupt``/``SystemExit`` raised in the middle of a step) writes nothing more: the
  run gives its lease up at once and shows as ``orphaned`` until resumed. The step in flight
  is lost (its committed predecessors are not) and runs again on resume.

The cost on the step loop is one attribute test per step; a run registers itself in a
process-wide table (a dict entry) while it executes, so a signal can reach it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING

from stargraph.errors import RunError
from stargraph.runtime._plan import ChildRunId

if TYPE_CHECKING:
    from stargraph.runtime._plan import Plan
    from stargraph.runtime._run import Run

__all__ = ["ACTIVE", "SIGNALLED", "SignalScope", "cancel_all", "cancel_on_signals", "request"]

ACTIVE: dict[Run, None] = {}
"""Runs executing in this process (nested ones too), in the order they started: a registry
of live runs that a signal must reach, not a cache (a run hashes by identity)."""


class _Signalled:
    """Why every run of this process is to stop (a signal under :func:`cancel_on_signals`),
    also those that start after the signal; ``None`` when nothing asked."""

    __slots__ = ("reason",)

    def __init__(self) -> None:
        self.reason: str | None = None


SIGNALLED = _Signalled()


def cancel_all(reason: str) -> None:
    """Ask every run executing in this process to stop at its next step boundary."""
    # list(): a snapshot taken under the GIL, while other threads add and remove runs.
    for run in list(ACTIVE):
        if run.cancelled is None:
            run.cancelled = reason


def request(plan: Plan, run_id: str, reason: str) -> bool:
    """Ask the runs of ``plan`` (one compiled graph's) called ``run_id`` executing in this
    process, and their nested runs, to stop at their next step boundary; whether any was
    found."""
    runs = list(ACTIVE)
    found = False
    for run in runs:
        if run.plan is plan and run.run_id == run_id:
            found = True
            if run.cancelled is None:
                run.cancelled = reason
    if found:
        for run in runs:
            if run.cancelled is None and ChildRunId.descends(run.run_id, run_id):
                run.cancelled = reason
    return found


class SignalScope:
    """What :func:`cancel_on_signals` saw: ``signum``, the first signal received (``None``:
    none), and ``forced``, whether a second one stopped the runs at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.forced = False

    @property
    def name(self) -> str | None:
        """The first signal's name (``"SIGINT"``), or ``None``."""
        return None if self.signum is None else signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's exit status for the first signal (``128 + signum``: 130 for SIGINT)."""
        return 128 + (self.signum or 0)


@contextlib.contextmanager
def cancel_on_signals(
    signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
    *,
    announce: bool = False,
    on_signal: Callable[[int], None] | None = None,
) -> Iterator[SignalScope]:
    """Turn ``signals`` (default SIGINT and SIGTERM) into cancellation while the block runs.

    The first signal asks every run executing in this process - and every run that starts
    later inside the block - to stop at its next step boundary: each is stored as
    ``cancelled`` at the step it reached, with its lease released, and raises
    :class:`~stargraph.errors.RunCancelledError` (``resume`` continues it). A second signal
    stops at once: ``KeyboardInterrupt`` (``SystemExit(128 + signum)`` for other signals) is
    raised in the main thread, and an interrupted run writes nothing more but gives its
    lease up, so it shows as ``orphaned`` until resumed. ``announce`` writes one line to
    stderr at the first signal, saying so; ``on_signal(signum)`` is called then too (say, to
    stop taking new work). The previous handlers come back when the block ends. Only the
    main thread can install signal handlers; elsewhere this raises
    :class:`~stargraph.errors.RunError` (use :meth:`CompiledGraph.cancel` there)::

        with cancel_on_signals() as scope:
            try:
                app.invoke(data, run_id="nightly")
            except RunCancelledError:
                print(f"stopped by {scope.name}; resume it with app.resume('nightly')")
    """
    if threading.current_thread() is not threading.main_thread():
        raise RunError(
            "cancel_on_signals() must run in the main thread (only it can install signal "
            "handlers); from another thread, stop a run with CompiledGraph.cancel(run_id)"
        )
    scope = SignalScope()
    outer = SIGNALLED.reason

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if scope.signum is None:
            scope.signum = signum
            SIGNALLED.reason = name
            cancel_all(name)
            if on_signal is not None:
                on_signal(signum)
            if announce:
                # os.write, not print: a handler may run while the main thread is inside a
                # write to sys.stderr, and buffered streams refuse a reentrant call.
                os.write(
                    2,
                    f"{name}: stopping after the current step; send it again to stop at "
                    "once\n".encode(),
                )
            return
        scope.forced = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    previous = {sig: signal.getsignal(sig) for sig in signals}
    try:
        for sig in signals:
            signal.signal(sig, handler)
        yield scope
    finally:
        for sig, old in previous.items():
            # None: a handler not installed from Python; the default is the closest match.
            signal.signal(sig, signal.SIG_DFL if old is None else old)
        SIGNALLED.reason = outer
