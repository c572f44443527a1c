"""``LazyDaemon``: the one background thread the lease keeper and the step watchdog each run."""

from __future__ import annotations

import threading

from stargraph._threads import LazyDaemon


def test_concurrent_starts_start_one_daemon_thread() -> None:
    ran: list[str] = []
    release = threading.Event()

    def target() -> None:
        ran.append(threading.current_thread().name)
        release.wait(5)

    daemon = LazyDaemon(target, name="sg-test-daemon")
    assert daemon.thread is None
    gate = threading.Barrier(8)

    def ask() -> None:
        gate.wait()
        daemon.start()

    askers = [threading.Thread(target=ask) for _ in range(8)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    started = daemon.thread
    assert started is not None
    assert started.daemon
    assert started.name == "sg-test-daemon"
    daemon.start()
    assert daemon.thread is started
    release.set()
    started.join(5)
    assert ran == ["sg-test-daemon"]


def test_after_fork_forgets_the_thread_and_the_next_start_makes_a_new_one() -> None:
    daemon = LazyDaemon(lambda: None, name="sg-test-daemon")
    daemon.start()
    first = daemon.thread
    assert first is not None
    first.join(5)
    daemon.after_fork()
    assert daemon.thread is None
    daemon.start()
    assert daemon.thread is not None
    assert daemon.thread is not first
    daemon.thread.join(5)
