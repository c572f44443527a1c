"""Run leases: one owner per run, heartbeats, and telling a dead owner from a live one.

An invoke or a resume takes the run's lease before any node runs (``create_run`` with an
owner, or ``CheckpointStore.acquire``) and holds it until the run is interrupted, finishes or
fails (the ``set_status`` that records that releases it). Every status change and every commit is a
compare-and-set on the lease's token, so a process that lost its lease cannot overwrite what
the new owner wrote. While a lease is held, one daemon thread per process (the *keeper*)
renews it every ``lease_s / 3`` seconds.

A run whose owner is gone is reported as ``orphaned`` and can be taken over at once:

- on the owner's own host, by asking the operating system (its pid is gone, a zombie, or a
  later process that reused the pid), and, in the owner's own process, by whether the lease
  is still held here (a run abandoned by an exception is not);
- anywhere, when the lease lapsed: no heartbeat for ``lease_s`` seconds, or at once when its
  owner abandoned it (``Lease.abandon``: a run stopped at once by a second Ctrl-C, or by a
  store error, keeps ``running`` with its owner on record and a lease that has lapsed).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import pydantic_core

from stargraph._threads import LazyDaemon
from stargraph.checkpoint._records import RunOwner, RunStatus, trusted_fields
from stargraph.errors import CheckpointError, LeaseLostError, RunBusyError, StargraphError

if TYPE_CHECKING:
    from stargraph.checkpoint._protocol import CheckpointStore

__all__ = [
    "DEFAULT_LEASE_S",
    "Lease",
    "busy_error",
    "effective_status",
    "is_orphaned",
    "lease_lost",
    "new_owner",
    "owner_alive",
    "owner_blob",
    "owner_from",
]

log = logging.getLogger("stargraph.checkpoint")

DEFAULT_LEASE_S: Final = 30.0
"""How long a run's lease lasts without a heartbeat (heartbeats come every third of it)."""

HOST: Final = socket.gethostname()

_LAPSED_S: Final = 1e-6
"""The lease a run abandoned by its owner is renewed for (see ``Lease.abandon``)."""


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start ticks)`` of a process from ``/proc`` (Linux), or ``None``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[19])
    except (IndexError, ValueError):
        return None


def _started_at(ticks: int | None) -> str:
    """The ISO time a process started, from its start ticks and the boot time."""
    if ticks is None:
        return ""
    try:
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError):
        return ""
    return datetime.fromtimestamp(btime + ticks / hz, UTC).isoformat(timespec="seconds")


_IDENTITY: dict[int, tuple[int | None, str]] = {}


def _identity() -> tuple[int | None, str]:
    pid = os.getpid()
    found = _IDENTITY.get(pid)
    if found is None:
        stat = _proc_stat(pid)
        ticks = None if stat is None else stat[1]
        found = _IDENTITY[pid] = (ticks, _started_at(ticks))
    return found


# The fields of this process's owners but the token, by (pid, lease length): every invoke
# with a store makes an owner, and only its token is new.
_OWNER_FIELDS: dict[tuple[int, float], dict[str, object]] = {}


def new_owner(lease_s: float = DEFAULT_LEASE_S) -> RunOwner:
    """A fresh owner (a new token) for this process."""
    pid = os.getpid()
    fields = _OWNER_FIELDS.get((pid, lease_s))
    if fields is None:
        ticks, started = _identity()
        fields = _OWNER_FIELDS[pid, lease_s] = {
            "token": "",
            "host": HOST,
            "pid": pid,
            "started_at": started,
            "process_start": ticks,
            "lease_s": float(lease_s),
        }
    # Every field is known to be valid: no validation (the record takes a copy of them).
    owner = dict(fields)
    owner["token"] = os.urandom(16).hex()
    return trusted_fields(RunOwner, owner)


_BLOBS: dict[tuple[object, ...], bytes] = {}


def owner_blob(owner: RunOwner) -> bytes:
    """The JSON a store keeps for an owner, without its token (stored in a column of its
    own for the compare-and-set). Cached: a process's identity does not change."""
    key = (owner.host, owner.pid, owner.started_at, owner.process_start, owner.lease_s)
    blob = _BLOBS.get(key)
    if blob is None:
        blob = _BLOBS[key] = owner.model_dump_json(exclude={"token"}).encode()
    return blob


def owner_from(token: str, blob: bytes) -> RunOwner:
    """An owner back from its token and :func:`owner_blob` (``ValueError`` if damaged)."""
    return RunOwner.model_validate({**pydantic_core.from_json(blob), "token": token})


def owner_alive(owner: RunOwner) -> bool | None:
    """Whether the owner's process still holds the lease: ``True``/``False`` on its own host,
    ``None`` (cannot tell) on another host."""
    if owner.host != HOST:
        return None
    if owner.pid == os.getpid() and owner.process_start == _identity()[0]:
        return _KEEPER.holds(owner.token)
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    stat = _proc_stat(owner.pid)
    if stat is None:
        return True  # no /proc: the pid exists, which is all we can know
    state, ticks = stat
    if state in ("Z", "X"):
        return False  # killed, not yet reaped by its parent
    return owner.process_start is None or ticks == owner.process_start


def is_orphaned(owner: RunOwner, *, expired: bool) -> bool:
    """Whether a lease's owner is gone: the lease lapsed, or its process is known dead."""
    return expired or owner_alive(owner) is False


def effective_status(stored: str, owner: RunOwner | None, *, expired: bool) -> RunStatus:
    """The status to report: a ``running`` run whose owner is gone is ``orphaned``."""
    if stored == "running" and owner is not None and is_orphaned(owner, expired=expired):
        return "orphaned"
    return stored  # type: ignore[return-value]  # the stores only keep RunStatus values


def busy_error(run_id: str, owner: RunOwner, expires: str | None) -> RunBusyError:
    """The error for a run whose lease another live owner holds."""
    until = f", lease renewed until {expires}" if expires else ""
    return RunBusyError(
        f"run {run_id!r} is being run by {owner.describe()}{until}; wait for it to stop, "
        "or call resume(..., wait=True) to wait for it; if that process is gone the run "
        "shows as 'orphaned' (at once on its own host, elsewhere once its lease lapses) and "
        "resumes at once",
        run_id=run_id,
        owner=owner.describe(),
    )


def lease_lost(run_id: str, token: str | None, holder: RunOwner | None) -> CheckpointError:
    """The error for a write whose lease token is not the run's (any more)."""
    if token is None and holder is not None:
        return busy_error(run_id, holder, None)  # a writer without a lease: the run is taken
    now = f"{holder.describe()} holds it now" if holder is not None else "nobody holds it now"
    return LeaseLostError(
        f"run {run_id!r}: this process's lease on the run was lost ({now}); it stops "
        "without writing, leaving the run to its current owner",
        run_id=run_id,
    )


class Lease:
    """A lease on one run held by this process; the keeper thread renews it.

    ``lost`` turns true when a renewal finds the lease taken over (a plain flag: set once,
    by the keeper thread). Dropped when released, and when the object is garbage collected
    (the run it belonged to was abandoned).
    """

    def __init__(self, store: CheckpointStore, run_id: str, owner: RunOwner) -> None:
        self.store = store
        self.run_id = run_id
        self.owner = owner
        # The lease token every status change and commit compares against (an attribute:
        # read a few times by every run).
        self.token = owner.token
        self.lost = False
        now = time.monotonic()
        self._due = now + owner.lease_s / 3
        self._last_ok = now

    def hold(self) -> None:
        """Start heartbeats (the store already records this lease)."""
        _KEEPER.add(self)

    def drop(self) -> None:
        """Stop heartbeats (the store already released the lease, e.g. by a status change)."""
        _KEEPER.remove(self)

    def release(self) -> None:
        """Give the lease up without changing the run's status, and stop heartbeats."""
        _KEEPER.remove(self)
        try:
            self.store.release(self.run_id, self.token)
        except StargraphError as exc:  # the lease lapses by itself
            log.warning("run %s: releasing its lease failed: %s", self.run_id, exc)

    def abandon(self) -> None:
        """Stop heartbeats and let the lease lapse now, without a status change: the run
        keeps its owner on record and shows as ``orphaned`` everywhere at once (a run
        stopped at once, or by a store error), so the next resume takes it over without
        waiting. A store that cannot take the write lets the lease lapse by itself (at once
        in this process, which no longer holds it)."""
        _KEEPER.remove(self)
        # A renewal for (almost) no time: expiring a lease needs no store method of its own.
        lapsed = self.owner.model_copy(update={"lease_s": _LAPSED_S})
        try:
            self.store.heartbeat(self.run_id, lapsed)
        except StargraphError as exc:
            log.warning("run %s: giving up its lease failed: %s", self.run_id, exc)

    def _beat(self) -> bool:
        """Renew once; ``False`` when the lease is gone for good."""
        try:
            ok = self.store.heartbeat(self.run_id, self.owner)
        except StargraphError as exc:
            log.warning("run %s: lease heartbeat failed: %s", self.run_id, exc)
            # Unreachable for a whole lease: another process may have taken the run over.
            ok = time.monotonic() - self._last_ok < self.owner.lease_s
            if ok:
                return True
        if not ok:
            self.lost = True
            return False
        self._last_ok = time.monotonic()
        return True


class _Keeper:
    """The per-process heartbeat thread for every held lease.

    Every invoke with a store adds and removes a lease: those are single operations on a
    dict (atomic under the GIL), without a lock; only starting the thread takes one.
    """

    def __init__(self) -> None:
        # By token; weak references: a lease whose run was abandoned stops being renewed.
        self._leases: dict[str, weakref.ref[Lease]] = {}
        self._wake = threading.Event()
        self._daemon = LazyDaemon(self._loop, name="stargraph-lease-heartbeat")

    def add(self, lease: Lease) -> None:
        self._leases[lease.token] = weakref.ref(lease, self._collected)
        if self._daemon.thread is None:
            self._daemon.start()
        if lease.owner.lease_s < 3.0:
            # Due before the thread's next once-a-second wake-up (short leases, in tests).
            self._wake.set()

    def remove(self, lease: Lease) -> None:
        self._leases.pop(lease.token, None)

    def _collected(self, ref: weakref.ref[Lease]) -> None:
        """A held lease was garbage collected (its run abandoned): forget it. Rare, so
        found by a scan, which spares every lease a callback of its own."""
        for token, held in self._leases.copy().items():
            if held is ref:
                self._leases.pop(token, None)

    def holds(self, token: str) -> bool:
        ref = self._leases.get(token)
        return ref is not None and ref() is not None

    def after_fork(self) -> None:
        # The child owns none of the parent's leases, and has no heartbeat thread.
        self._leases = {}
        self._wake = threading.Event()
        self._daemon.after_fork()

    def _loop(self) -> None:
        while True:
            # A copy (one C call, so no garbage collection and its callbacks run while it
            # is made): adds and removes go on meanwhile.
            refs = self._leases.copy().values()
            leases = [lease for ref in refs if (lease := ref()) is not None]
            del refs
            wait = self._renew_due(leases)
            del leases  # no strong reference while sleeping
            # The thread stays (idle, waking once a second) for the next lease: starting a
            # thread per run would cost every invoke ~50 us.
            self._wake.wait(wait)
            self._wake.clear()

    def _renew_due(self, leases: list[Lease]) -> float:
        """Renew the leases that are due; seconds until the next one is."""
        wait = 1.0
        for lease in leases:
            if lease._due <= time.monotonic():
                if not lease._beat():
                    self.remove(lease)
                    continue
                lease._due = time.monotonic() + lease.owner.lease_s / 3
            wait = min(wait, max(0.0, lease._due - time.monotonic()))
        return wait


_KEEPER = _Keeper()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_KEEPER.after_fork)
