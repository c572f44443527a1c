"""LockManager: S/X compatibility (B5), all-or-nothing locksets (B6), intention locks (B7)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from stargraph.errors import LockTimeoutError
from stargraph.tools import LockManager, LockRequest


def locks(*texts: str) -> list[LockRequest]:
    return [LockRequest.parse(text) for text in texts]


def test_shared_locks_are_granted_together() -> None:
    manager = LockManager()
    first = manager.acquire(locks("r:S"), owner="a")
    second = manager.acquire(locks("r:S"), owner="b", timeout=0.1)
    assert manager.snapshot() == {"r": (("a", "S"), ("b", "S"))}
    manager.release(first)
    manager.release(second)
    assert manager.snapshot() == {}


@pytest.mark.parametrize(("held", "wanted"), [("X", "S"), ("X", "X"), ("S", "X")])
def test_exclusive_conflicts_with_everything(held: str, wanted: str) -> None:
    manager = LockManager()
    lease = manager.acquire(locks(f"r:{held}"), owner="holder")
    with pytest.raises(LockTimeoutError) as info:
        manager.acquire(locks(f"r:{wanted}"), owner="late", timeout=0.05)
    assert str(info.value) == (
        f"late could not acquire [r:{wanted}] within 0.05s; held by: holder (r:{held}) "
        "(fix: retry later, raise lock_timeout, or make the holder finish sooner)"
    )
    assert manager.waiting == 0  # the timed-out request left the queue
    manager.release(lease)
    manager.release(manager.acquire(locks(f"r:{wanted}"), timeout=0.05))


@pytest.mark.parametrize(
    ("first", "second", "conflict"),
    [
        ("workspace:X", "file:a.txt:S", True),
        ("file:a.txt:S", "workspace:X", True),
        ("workspace:X", "file:a.txt:X", True),
        ("workspace:S", "file:a.txt:S", False),
        ("workspace:S", "file:a.txt:X", True),
        ("file:a.txt:X", "file:b.txt:X", False),
        ("file:a.txt:X", "file:a.txt:S", True),
        ("browser_tab:X", "file:a.txt:X", False),
        ("workspace:X", "browser_tab:X", False),
    ],
)
def test_intention_locks_make_workspace_conflict_with_files(
    first: str, second: str, conflict: bool
) -> None:
    manager = LockManager()
    lease = manager.acquire(locks(first), owner="one")
    granted = manager.try_acquire(locks(second), owner="two")
    assert (granted is None) is conflict
    if granted is not None:
        manager.release(granted)
    manager.release(lease)


def test_expand_adds_intention_locks_and_takes_the_stronger_mode() -> None:
    manager = LockManager()
    assert manager.expand(locks("file:b:S", "file:a:X")) == {
        "file:a": "X",
        "file:b": "S",
        "workspace": "IX",
    }
    # S on the workspace plus a file write: S+IX has no exact cover without SIX, so X.
    assert manager.expand(locks("workspace:S", "file:a:X"))["workspace"] == "X"
    assert manager.expand(locks("r:S", "r:X")) == {"r": "X"}


def test_waiting_request_holds_nothing_and_is_granted_whole() -> None:
    manager = LockManager()
    blocker = manager.acquire(locks("b:X"), owner="blocker")
    got: list[object] = []
    thread = threading.Thread(
        target=lambda: got.append(manager.acquire(locks("a:X", "b:X"), owner="w", timeout=5))
    )
    thread.start()
    while manager.waiting == 0:
        time.sleep(0.001)
    # No hold-and-wait: while it waits for b, the waiter does not sit on a.
    assert "a" not in manager.snapshot()
    manager.release(blocker)
    thread.join(5)
    assert manager.snapshot() == {"a": (("w", "X"),), "b": (("w", "X"),)}


def test_fifo_fairness_a_queued_writer_is_not_starved_by_new_readers() -> None:
    manager = LockManager()
    reader = manager.acquire(locks("r:S"), owner="reader")
    order: list[str] = []

    def write() -> None:
        manager.release(manager.acquire(locks("r:X"), owner="writer", timeout=5))
        order.append("writer")

    writer = threading.Thread(target=write)
    writer.start()
    while manager.waiting == 0:
        time.sleep(0.001)
    # A new reader is compatible with the holder but must not overtake the queued writer.
    assert manager.try_acquire(locks("r:S"), owner="late reader") is None
    # A request on another resource is not held up by the queue.
    other = manager.try_acquire(locks("q:X"), owner="other")
    assert other is not None
    manager.release(other)
    manager.release(reader)
    writer.join(5)
    assert order == ["writer"]


def test_100_concurrent_opposite_order_pairs_all_finish() -> None:
    manager = LockManager()
    finished: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(200)

    def worker(index: int, lockset: list[LockRequest]) -> None:
        try:
            start.wait()
            with manager.hold(lockset, owner=f"w{index}", timeout=20):
                time.sleep(0.0005)
            finished.append(index)
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    threads = [
        threading.Thread(
            target=worker, args=(i, locks("A:X", "B:X") if i % 2 else locks("B:X", "A:X"))
        )
        for i in range(200)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert sorted(finished) == list(range(200))
    assert manager.snapshot() == {}
    assert manager.waiting == 0


def test_no_partially_held_lockset_is_ever_observable() -> None:
    manager = LockManager()
    stop = threading.Event()
    violations: list[object] = []

    def observer() -> None:
        while not stop.is_set():
            snap = manager.snapshot()
            a = {owner for owner, _ in snap.get("A", ())}
            b = {owner for owner, _ in snap.get("B", ())}
            if a != b:  # every lease holds both A and B, or neither
                violations.append(snap)

    def worker(index: int) -> None:
        for _ in range(50):
            order = ("A:S", "B:X") if index % 2 else ("B:S", "A:S")
            with manager.hold(locks(*order), owner=f"w{index}", timeout=20):
                pass

    watcher = threading.Thread(target=observer)
    watcher.start()
    workers = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(30)
    stop.set()
    watcher.join(5)
    assert violations == []


def test_release_twice_is_an_error() -> None:
    manager = LockManager()
    lease = manager.acquire(locks("r:X"), owner="o")
    manager.release(lease)
    with pytest.raises(RuntimeError, match="lease 1 of 'o' is not held"):
        manager.release(lease)


def test_async_acquire_waits_without_blocking_the_loop() -> None:
    manager = LockManager()

    async def main() -> list[str]:
        events: list[str] = []
        holder = await manager.acquire_async(locks("r:X"), owner="first")

        async def second() -> None:
            lease = await manager.acquire_async(locks("r:X"), owner="second", timeout=5)
            events.append("second got it")
            manager.release(lease)

        task = asyncio.create_task(second())
        await asyncio.sleep(0.05)
        events.append("loop still runs")
        manager.release(holder)
        await task
        return events

    assert asyncio.run(main()) == ["loop still runs", "second got it"]


def test_cancelled_async_acquire_releases_a_late_grant() -> None:
    manager = LockManager()

    async def main() -> None:
        holder = manager.acquire(locks("r:X"), owner="holder")
        task = asyncio.create_task(manager.acquire_async(locks("r:X"), owner="cancelled"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        manager.release(holder)
        for _ in range(100):  # the worker thread gets the grant, then gives it back
            await asyncio.sleep(0.01)
            if not manager.snapshot() and manager.waiting == 0:
                break
        assert manager.snapshot() == {}

    asyncio.run(main())


def test_an_empty_lockset_is_granted_at_once_behind_a_queued_writer() -> None:
    # A tool that declares no locks conflicts with no one: it neither waits behind a queued
    # writer nor blocks it, holds nothing, and its lease is released once like any other.
    manager = LockManager()
    reader = manager.acquire(locks("r:S"), owner="reader")
    writer_done = threading.Event()

    def writer() -> None:
        manager.release(manager.acquire(locks("r:X"), owner="writer", timeout=5))
        writer_done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 5
    while manager.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert manager.waiting == 1
    nothing = manager.acquire([], owner="plain", timeout=0)
    assert manager.waiting == 1  # not queued, and the writer still waits for the reader
    assert manager.snapshot() == {"r": (("reader", "S"),)}
    manager.release(nothing)
    with pytest.raises(RuntimeError, match="not held by this lock manager"):
        manager.release(nothing)
    manager.release(reader)
    thread.join(5)
    assert writer_done.is_set()
    assert manager.snapshot() == {}
