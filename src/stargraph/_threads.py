"""The per-process background threads the library starts on first need.

The lease keeper (``checkpoint._lease``) and the step watchdog (``runtime._tasks``) each run
one daemon thread for the whole process, started by the first run that needs it and kept
for the next. :class:`LazyDaemon` is that thread, started once under a lock however many
threads ask at the same time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["LazyDaemon"]


class LazyDaemon:
    """One daemon thread named ``name`` running ``target``, started by the first
    :meth:`start`. ``thread`` is ``None`` until then: a caller on a hot path checks it
    before calling :meth:`start`, which costs a lock."""

    __slots__ = ("_lock", "_name", "_target", "thread")

    def __init__(self, target: Callable[[], None], *, name: str) -> None:
        self._target = target
        self._name = name
        self._lock = threading.Lock()
        self.thread: threading.Thread | None = None
        """The running thread, once started."""

    def start(self) -> None:
        """Start the thread unless it is started already (by this or another thread)."""
        with self._lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._target, name=self._name, daemon=True)
                self.thread.start()

    def after_fork(self) -> None:
        """In a forked child: no thread runs there (the parent's did not come along), and the
        lock may have been held by a parent thread at the fork. The next :meth:`start` starts
        the child's own."""
        self._lock = threading.Lock()
        self.thread = None
