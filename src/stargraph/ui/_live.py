"""What the console's event streams sleep on, and the model output of the runs it drives.

An event stream (one per open page) reads the store, sends what changed and sleeps on a
:class:`Wakeup`. It is woken by the store's watch (a ``NOTIFY`` on PostgreSQL, the poll
interval elsewhere), by new model tokens of a run the console itself runs
(:class:`LiveText`), or by the console closing. Wake-ups come from other threads (the
console's run threads, the server's shutdown), hence ``call_soon_threadsafe``.

:class:`LiveText` holds the tokens of the console's own runs (an answer, a continued fork, a
live replay run in the console's process with stream mode ``messages``). The checkpoint store
keeps no partial output of a model call; a run that ``stargraph serve`` runs, in any process,
stores its tokens as events beside the checkpoints, which :mod:`stargraph.ui._served` reads.
A run of another process that no server runs shows its reply when its step commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stargraph.runtime import MessageChunk

__all__ = ["Closing", "LiveText", "Partial", "Wakeup", "Wakeups"]


class Wakeup:
    """The event one stream sleeps on; :meth:`set` may be called from any thread."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def set(self) -> None:
        """Wake the stream (thread-safe)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to wake
            self._loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        """Forget earlier wake-ups (call on the loop, before reading what changed)."""
        self._event.clear()

    async def wait(self, timeout_s: float) -> None:
        """Sleep until woken or ``timeout_s`` passed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), max(timeout_s, 0.0))


class Wakeups:
    """The sleeping streams, by the run they follow (``None``: every run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_run: dict[str | None, set[Wakeup]] = {}

    def add(self, run_id: str | None, wakeup: Wakeup) -> None:
        """Wake ``wakeup`` when ``run_id`` changes here."""
        with self._lock:
            self._by_run.setdefault(run_id, set()).add(wakeup)

    def discard(self, run_id: str | None, wakeup: Wakeup) -> None:
        """Stop waking ``wakeup`` (its stream ended)."""
        with self._lock:
            found = self._by_run.get(run_id)
            if found is not None:
                found.discard(wakeup)
                if not found:
                    del self._by_run[run_id]

    def wake(self, *run_ids: str) -> None:
        """Wake the streams that follow these runs (not those of the runs list: the store's
        watch wakes those)."""
        with self._lock:
            woken = [w for key in run_ids for w in self._by_run.get(key, ())]
        for wakeup in woken:
            wakeup.set()

    def wake_all(self) -> None:
        """Wake every stream (the console is closing)."""
        with self._lock:
            woken = [w for found in self._by_run.values() for w in found]
        for wakeup in woken:
            wakeup.set()


class Closing(threading.Event):
    """The console's closing flag; setting it wakes every stream, so each ends at once."""

    def __init__(self, wakeups: Wakeups) -> None:
        super().__init__()
        self._wakeups = wakeups

    def set(self) -> None:
        """Mark the console closing and wake every stream."""
        super().set()
        self._wakeups.wake_all()


@dataclass(frozen=True, slots=True)
class Partial:
    """The text a model call of one task has streamed so far."""

    run_id: str
    step: int
    node: str
    index: int
    text: str


class LiveText:
    """The partial model output of the tasks in flight in runs the console drives.

    Text is kept per task of the run that made it, also listed under the run the console
    resumed (a skill's model call shows on its parent's page). A committed step's text is
    dropped (the step's record has the whole reply), and so is all of a run's when it ends.
    """

    def __init__(self, wakeups: Wakeups) -> None:
        self._wakeups = wakeups
        self._lock = threading.Lock()
        # (run that made it, step, node, index) -> (the run the console drives, the text)
        self._texts: dict[tuple[str, int, str, int], tuple[str, str]] = {}

    def add(self, top: str, chunk: MessageChunk) -> None:
        """Append a piece of a model's reply streamed in the console's run ``top`` (by one
        of its tasks, or a task of one of its skill runs)."""
        key = (chunk.run_id, chunk.step, chunk.node, chunk.index)
        with self._lock:
            _, before = self._texts.get(key, (top, ""))
            self._texts[key] = (top, before + chunk.text)
        self._wakeups.wake(chunk.run_id, top)

    def committed(self, run_id: str, step: int) -> None:
        """Step ``step`` of ``run_id`` committed: its partial text is in its record now."""
        with self._lock:
            done = [k for k in self._texts if k[0] == run_id and k[1] <= step]
            tops = {self._texts.pop(k)[0] for k in done}
        if done:
            self._wakeups.wake(run_id, *tops)

    def ended(self, top: str) -> None:
        """The console's run ``top`` stopped (finished, interrupted, failed): drop its text."""
        with self._lock:
            done = [k for k, (t, _) in self._texts.items() if t == top]
            runs = {k[0] for k in done}
            for key in done:
                del self._texts[key]
        if done:
            self._wakeups.wake(top, *runs)

    def of(self, run_id: str) -> list[Partial]:
        """The partial replies shown on ``run_id``'s page, in task order."""
        with self._lock:
            found = [
                Partial(k[0], k[1], k[2], k[3], text)
                for k, (top, text) in self._texts.items()
                if run_id in (k[0], top)
            ]
        return sorted(found, key=lambda p: (p.run_id != run_id, p.run_id, p.step, p.node, p.index))
