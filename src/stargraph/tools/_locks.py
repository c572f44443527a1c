"""``LockManager``: shared/exclusive locks over named resources.

Design, and why it cannot deadlock:

* A call asks for its **whole lockset at once** and gets all of it or nothing; while waiting it
  holds nothing (no hold-and-wait), so no cycle of holders waiting on each other can form.
  Grants happen under one mutex, so no partially held lockset is ever observable.
* **FIFO fairness**: a request may not overtake an earlier *conflicting* waiter, so a stream of
  readers cannot starve a writer. A waiter only ever waits on holders (who are running) or
  on earlier waiters, which is a well-founded order.
* **Intention locks** (multi-granularity locking): ``file:<p>`` in mode S/X also takes
  ``workspace`` in IS/IX, so ``workspace:X`` conflicts with any file lock while two writers of
  different files do not conflict. If one lockset needs two modes on one resource, the
  stronger is taken (S with IX escalates to X, conservatively, instead of SIX).
* Resources are sorted canonically; order is irrelevant for safety under one mutex but keeps
  error messages and snapshots deterministic.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final, Literal

from stargraph.errors import LockTimeoutError, ToolError, ToolSpecError
from stargraph.tools._result import ToolFailure

__all__ = ["Lease", "LockManager", "LockRequest", "ResourceMode"]

ResourceMode = Literal["IS", "IX", "S", "X"]

_COMPATIBLE: Final[dict[str, frozenset[str]]] = {
    "IS": frozenset({"IS", "IX", "S"}),
    "IX": frozenset({"IS", "IX"}),
    "S": frozenset({"IS", "S"}),
    "X": frozenset(),
}
_RANK: Final = {"IS": 0, "IX": 1, "S": 1, "X": 2}


def _join(a: str, b: str) -> str:
    """Least mode covering both ``a`` and ``b`` (S+IX has no exact cover without SIX: X)."""
    if a == b:
        return a
    if {a, b} == {"S", "IX"}:
        return "X"
    return a if _RANK[a] >= _RANK[b] else b


@dataclass(frozen=True, slots=True)
class LockRequest:
    """One lock: a concrete resource key and ``S`` or ``X``."""

    resource: str
    mode: Literal["S", "X"]

    @classmethod
    def parse(cls, text: str) -> LockRequest:
        """``"file:a.txt:S"`` -> ``LockRequest("file:a.txt", "S")``.

        Raises :class:`~stargraph.errors.ToolSpecError` (a ``ValueError``) naming the text.
        """
        resource, _, mode = text.rpartition(":")
        if mode not in ("S", "X") or not resource:
            raise ToolSpecError.at(
                f"lock {text!r}",
                "a lock must end in ':S' or ':X' after a resource",
                "write e.g. 'workspace:X' or 'file:notes.txt:S'",
                subject="lock request",
            )
        return cls(resource, mode)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, eq=False)
class Lease:
    """A granted lockset. Hand it back to :meth:`LockManager.release` exactly once."""

    id: int
    owner: str
    modes: Mapping[str, ResourceMode]
    granted_at: float


@dataclass(slots=True, eq=False)
class _Ticket:
    owner: str
    modes: dict[str, ResourceMode]
    granted: bool = field(default=False)
    # An asyncio waiter: granted by whoever frees its resources (under the mutex), then woken
    # with this, instead of blocking a thread on the condition.
    wake: Callable[[], None] | None = field(default=None)
    lease: Lease | None = field(default=None)


class LockManager:
    """Thread-safe S/X lock manager with all-or-nothing locksets; usable from asyncio.

    ``parents`` maps a resource kind to the resource it lies inside (``file`` -> ``workspace``
    by default): locking a child takes an intention lock on the parent.
    """

    def __init__(self, *, parents: Mapping[str, str] | None = None) -> None:
        self._parents = dict(parents if parents is not None else {"file": "workspace"})
        # Entered as the bare lock (``with self._mutex``), the condition's own lock: the
        # same mutual exclusion without Condition's Python-level __enter__ and __exit__.
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._held: dict[str, Counter[str]] = {}
        self._leases: dict[int, Lease] = {}
        self._queue: list[_Ticket] = []
        self._ids = itertools.count(1)

    # ----------------------------------------------------------------------- public API

    def expand(self, locks: Iterable[LockRequest]) -> dict[str, ResourceMode]:
        """The resource -> mode map actually taken for ``locks``, intention locks included."""
        modes: dict[str, ResourceMode] = {}
        for lock in locks:
            pairs: list[tuple[str, str]] = [(lock.resource, lock.mode)]
            parent = self._parents.get(lock.resource.split(":", 1)[0])
            if parent is not None and parent != lock.resource:
                pairs.append((parent, "I" + lock.mode))
            for resource, mode in pairs:
                current = modes.get(resource)
                modes[resource] = _join(current, mode) if current else mode  # type: ignore[assignment]
        return dict(sorted(modes.items()))

    def acquire(
        self,
        locks: Iterable[LockRequest],
        *,
        owner: str = "",
        timeout: float | None = None,
    ) -> Lease:
        """Block until every lock in ``locks`` is granted together; return the lease.

        Raises :class:`LockTimeoutError` after ``timeout`` seconds naming the owner, the
        lockset and the current holders of the conflicting resources; nothing stays held.
        """
        # An empty tuple (a tool that declares no locks, most calls) expands to nothing.
        modes = {} if type(locks) is tuple and not locks else self.expand(locks)
        if not modes:
            # Nothing to lock: nothing to wait for or to queue behind, since an empty
            # lockset conflicts with no one.
            with self._mutex:
                lease = Lease(next(self._ids), owner, {}, time.monotonic())
                self._leases[lease.id] = lease
            return lease
        ticket = _Ticket(owner, modes)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._mutex:
            self._queue.append(ticket)
            try:
                while not self._grantable(ticket):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise self._timeout_error(ticket, timeout)
                    self._cond.wait(remaining)
                return self._grant(ticket)
            finally:
                if not ticket.granted:
                    self._queue.remove(ticket)
                    # A removed waiter may have been what later requests queued behind.
                    self._wake_all()

    def try_acquire(self, locks: Iterable[LockRequest], *, owner: str = "") -> Lease | None:
        """Grant ``locks`` now if possible (same fairness rule), else return ``None``."""
        ticket = _Ticket(owner, self.expand(locks))
        with self._mutex:
            self._queue.append(ticket)
            try:
                return self._grant(ticket) if self._grantable(ticket) else None
            finally:
                if not ticket.granted:
                    self._queue.remove(ticket)

    async def acquire_async(
        self,
        locks: Iterable[LockRequest],
        *,
        owner: str = "",
        timeout: float | None = None,
    ) -> Lease:
        """:meth:`acquire` for asyncio, waiting on the event loop itself.

        No thread is blocked while waiting: a waiting thread per call would come from the
        loop's default executor, which a burst of waiters exhausts (the holders' bodies
        then cannot run and everyone times out). The waiter is queued like any other
        (same FIFO rule) and woken by :meth:`release` through ``call_soon_threadsafe``. If
        the awaiting task is cancelled, nothing stays held or queued.
        """
        ticket = _Ticket(owner, self.expand(locks))
        with self._mutex:
            self._queue.append(ticket)
            if self._grantable(ticket):
                return self._grant(ticket)
            loop = asyncio.get_running_loop()
            granted = asyncio.Event()

            def wake() -> None:
                # RuntimeError: the waiter's loop is closed, so there is nobody to wake.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(granted.set)

            ticket.wake = wake
        handed_over = False
        try:
            try:
                async with asyncio.timeout(timeout):
                    await granted.wait()
            except TimeoutError:
                with self._mutex:
                    if not ticket.granted:
                        raise self._timeout_error(ticket, timeout) from None
            if ticket.lease is None:  # pragma: no cover - granted always comes with a lease
                raise ToolError(f"lock ticket of {owner!r} woken without a lease (a bug)")
            handed_over = True
            return ticket.lease
        finally:
            if not handed_over:
                with self._mutex:
                    if ticket.lease is not None:
                        # Granted while the task was being cancelled: give it straight back.
                        self._release_locked(ticket.lease)
                    else:
                        self._queue.remove(ticket)
                        # A removed waiter may have been what later requests queued behind.
                        self._wake_all()

    def release(self, lease: Lease) -> None:
        """Return every lock of ``lease`` and wake waiters.

        Releasing a lease twice (or one of another manager) raises
        :class:`~stargraph.errors.ToolError` naming the lease and its owner.
        """
        with self._mutex:
            self._release_locked(lease)

    @contextmanager
    def hold(
        self, locks: Iterable[LockRequest], *, owner: str = "", timeout: float | None = None
    ) -> Iterator[Lease]:
        """``with manager.hold(locks): ...`` -- acquire, and release even on exceptions."""
        lease = self.acquire(locks, owner=owner, timeout=timeout)
        try:
            yield lease
        finally:
            self.release(lease)

    def snapshot(self) -> dict[str, tuple[tuple[str, ResourceMode], ...]]:
        """Resource -> sorted ``(owner, mode)`` holders, taken atomically (for tests/metrics)."""
        with self._mutex:
            view: dict[str, list[tuple[str, ResourceMode]]] = {}
            for lease in self._leases.values():
                for resource, mode in lease.modes.items():
                    view.setdefault(resource, []).append((lease.owner, mode))
        return {resource: tuple(sorted(holders)) for resource, holders in sorted(view.items())}

    @property
    def waiting(self) -> int:
        """How many requests are queued right now."""
        with self._mutex:
            return len(self._queue)

    # ----------------------------------------------------------------------- internals

    def _release_locked(self, lease: Lease) -> None:
        if self._leases.pop(lease.id, None) is None:
            raise ToolError(
                f"lease {lease.id} of {lease.owner!r} is not held by this lock manager (fix: "
                "release each lease once, on the manager that granted it)"
            )
        if not lease.modes:
            return  # it held nothing: no waiter can go now that could not before
        for resource, mode in lease.modes.items():
            counts = self._held[resource]
            counts[mode] -= 1
            if counts[mode] == 0:
                del counts[mode]
            if not counts:
                del self._held[resource]
        self._wake_all()

    def _wake_all(self) -> None:
        """Wake the waiting threads, and grant asyncio waiters that can go now (the mutex is
        held). Granting here, not when their task next runs, keeps them from stalling the
        queue while their loop is busy, and keeps FIFO order exact (queue order)."""
        self._cond.notify_all()
        if not self._queue:
            return
        for ticket in list(self._queue):
            if ticket.wake is not None and self._grantable(ticket):
                ticket.lease = self._grant(ticket)
                ticket.wake()

    def _conflicts(self, a: Mapping[str, str], b: Mapping[str, str]) -> bool:
        return any(r in b and b[r] not in _COMPATIBLE[m] for r, m in a.items())

    def _grantable(self, ticket: _Ticket) -> bool:
        for resource, mode in ticket.modes.items():
            held = self._held.get(resource)
            if held and any(other not in _COMPATIBLE[mode] for other in held):
                return False
        for earlier in self._queue:
            if earlier is ticket:
                return True
            if self._conflicts(ticket.modes, earlier.modes):
                return False  # FIFO: never overtake an earlier conflicting waiter
        return True

    def _grant(self, ticket: _Ticket) -> Lease:
        for resource, mode in ticket.modes.items():
            self._held.setdefault(resource, Counter())[mode] += 1
        self._queue.remove(ticket)
        ticket.granted = True
        lease = Lease(next(self._ids), ticket.owner, dict(ticket.modes), time.monotonic())
        self._leases[lease.id] = lease
        return lease

    def _timeout_error(self, ticket: _Ticket, timeout: float | None) -> LockTimeoutError:
        holders = sorted(
            {
                f"{lease.owner or '?'} ({resource}:{mode})"
                for lease in self._leases.values()
                for resource, mode in lease.modes.items()
                if resource in ticket.modes and mode not in _COMPATIBLE[ticket.modes[resource]]
            }
        )
        wanted = ", ".join(f"{r}:{m}" for r, m in ticket.modes.items())
        hint = "retry later, raise lock_timeout, or make the holder finish sooner"
        message = (
            f"{ticket.owner or 'a call'} could not acquire [{wanted}] within {timeout}s; "
            f"held by: {', '.join(holders) or 'earlier waiters'} (fix: {hint})"
        )
        failure = ToolFailure(
            code="lock_timeout",
            tool=ticket.owner,
            message=message,
            hint=hint,
            details={"lockset": wanted, "holders": list(holders)},
        )
        return LockTimeoutError(message, failure=failure)
