"""The periodic orphan scan: :meth:`AgentStore.orphan_scan` run every ``every`` seconds.

An agent that terminates without its thought record is an orphan; the store flags it when
scanned. :class:`OrphanScanner` scans on a schedule, so orphans are flagged whether or not
anyone remembers to ask: :meth:`~OrphanScanner.tick` scans when a scan is due (call it from a
loop you already have, such as a worker's), and :meth:`~OrphanScanner.start` runs the
schedule on a background thread until :meth:`~OrphanScanner.stop`. Each scan flags only
agents no earlier scan flagged, so a long-running scanner warns once per orphan.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from stargraph.errors import UsageError

if TYPE_CHECKING:
    from stargraph.agents._store import AgentStore

__all__ = ["OrphanScanner"]


class OrphanScanner:
    """Runs ``store.orphan_scan(new_only=True)`` every ``every`` seconds.

    ``clock`` (seconds, monotonic) and ``wait`` (block up to the given seconds; ``True``
    when the scanner was stopped meanwhile) are injectable, so a test drives the schedule
    without sleeping. The first scan is due at once.

    >>> from stargraph.agents import AgentStore
    >>> now = [0.0]
    >>> scanner = OrphanScanner(AgentStore(), every=30, clock=lambda: now[0])
    >>> scanner.tick(), scanner.tick()   # due at once, then not for 30 s
    ([], None)
    >>> now[0] = 30.0
    >>> scanner.tick()
    []
    """

    def __init__(
        self,
        store: AgentStore,
        *,
        every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        if not every > 0:
            raise UsageError(
                f"OrphanScanner(every={every!r}): the period must be a positive number of seconds"
            )
        self.store = store
        self.every = every
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._due = clock()
        self._thread: threading.Thread | None = None
        self.scans = 0
        """Scans run so far."""

    def due_in(self) -> float:
        """Seconds until the next scan is due (``0`` when it is due now)."""
        return max(0.0, self._due - self._clock())

    def tick(self) -> list[str] | None:
        """Scan if a scan is due: the orphans it flagged (empty when none), or ``None`` when
        no scan was due."""
        now = self._clock()
        if now < self._due:
            return None
        # The next scan is due a period after this one, not after the late tick that ran it,
        # so the schedule does not drift; a scanner that fell behind catches up by one scan.
        self._due = max(self._due + self.every, now)
        self.scans += 1
        return self.store.orphan_scan(new_only=True)

    def run(self) -> None:
        """Scan on schedule until :meth:`stop` (blocks; :meth:`start` runs it on a thread)."""
        while not self._stop.is_set():
            self.tick()
            if self._wait(self.due_in()):
                break

    def start(self) -> OrphanScanner:
        """Run the schedule on a daemon thread; returns the scanner."""
        if self._thread is not None:
            raise UsageError("this OrphanScanner is started already; stop() it first")
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="orphan-scan", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the schedule and wait (up to ``timeout`` seconds) for the thread to end."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def __enter__(self) -> OrphanScanner:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
