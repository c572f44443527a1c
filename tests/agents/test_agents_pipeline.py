"""Rows D12-D15: a sub-agent's phases with a checkpoint at each boundary, the parent
notified and the slot released at termination, the periodic orphan scan, and the pool and
queue sized by the profile's limits - all through the public ``stargraph.agents`` API."""

from __future__ import annotations

import pickle
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.agents import (
    AgentProfile,
    AgentRecord,
    AgentStore,
    Notification,
    OrphanScanner,
    OrphanWarning,
    Phase,
    PhaseCheckpoint,
    QueuedTask,
    TaskNeeds,
    phase_checkpoints,
    phased_graph,
)
from stargraph.checkpoint import SqliteStore
from stargraph.errors import (
    AgentQueueFullError,
    LifecycleError,
    NodeError,
    UsageError,
    WaitTimeoutError,
)

UPDATE = {"task_id": "t1", "status": "done", "progress": 100, "summary": "archived"}
THOUGHT = {"task_id": "t1", "branch": "feature/t1", "commit_sha": "abc123"}


def coder(max_tasks: int = 1, queued: int | None = None) -> AgentProfile:
    limits: dict[str, Any] = {"max_concurrent_tasks": max_tasks}
    if queued is not None:
        limits["max_queued_tasks"] = queued
    return AgentProfile.model_validate({"agent_type": "coder", "limits": limits})


@pytest.fixture
def ids() -> Iterator[str]:
    return (f"a{i}" for i in range(1, 1000))


@pytest.fixture
def store(tmp_path: Path, ids: Iterator[str]) -> Iterator[AgentStore]:
    with AgentStore(tmp_path / "agents.db", new_id=lambda: next(ids)) as s:
        yield s


def finish(store: AgentStore, agent_id: str, *, thought: bool = True) -> AgentRecord:
    """Run an allocated agent through its lifecycle to TERMINATED, with its writeback."""
    store.spawn(agent_id)
    store.initialize(agent_id)
    store.assign(agent_id, "t1")
    store.task_update(agent_id, UPDATE)
    if thought:
        store.thought_record(agent_id, THOUGHT)
        return store.terminate(agent_id)
    with pytest.warns(Warning, match="without its writeback"):
        return store.terminate(agent_id)


# ---------------------------------------------------------------------------------- D15


def test_D15_limits_size_the_pool_and_the_queue_depth(store: AgentStore) -> None:
    profile = coder(max_tasks=2, queued=1)
    first, second, third = (store.submit(profile, TaskNeeds(task_id=f"t{i}")) for i in (1, 2, 3))
    assert isinstance(first, AgentRecord)
    assert isinstance(second, AgentRecord)
    assert (first.task_id, second.task_id) == ("t1", "t2")
    assert isinstance(third, QueuedTask)
    assert third.needs.task_id == "t3"
    with pytest.raises(AgentQueueFullError) as caught:
        store.submit(profile, TaskNeeds(task_id="t4"))
    assert (caught.value.agent_type, caught.value.queue_depth) == ("coder", 1)
    message = str(caught.value)
    assert "'coder'" in message
    assert "limits.queue_depth=1" in message
    assert "limits.max_concurrent_tasks=2" in message
    assert isinstance(caught.value, LifecycleError)
    assert [q.needs.task_id for q in store.queued("coder")] == ["t3"]
    assert store.active_counts() == {"coder": 2}


def test_D15_the_default_queue_depth_is_one_task_per_slot(store: AgentStore) -> None:
    profile = coder(max_tasks=2)
    assert profile.limits.queue_depth == 2
    placed = [store.submit(profile, TaskNeeds(task_id=f"t{i}")) for i in range(4)]
    assert [type(p).__name__ for p in placed] == ["AgentRecord"] * 2 + ["QueuedTask"] * 2
    with pytest.raises(AgentQueueFullError, match=r"limits\.queue_depth=2"):
        store.submit(profile, TaskNeeds(task_id="t4"))
    other = AgentProfile(agent_type="reviewer", limits=coder(max_tasks=1, queued=0).limits)
    store.submit(other, TaskNeeds())
    with pytest.raises(AgentQueueFullError, match="'reviewer'"):
        store.submit(other, TaskNeeds())


def test_D15_an_ended_agent_gives_its_slot_to_the_oldest_queued_task(
    tmp_path: Path, ids: Iterator[str]
) -> None:
    profile = coder(max_tasks=1, queued=2)
    with AgentStore(tmp_path / "agents.db", new_id=lambda: next(ids)) as store:
        running = store.submit(profile, TaskNeeds(task_id="t1"), parent="p")
        store.submit(profile, TaskNeeds(task_id="t2", pool="research"), parent="p")
        store.submit(profile, TaskNeeds(task_id="t3"))
        assert isinstance(running, AgentRecord)
    # The queue is durable: a store reopened on the file serves it.
    with AgentStore(tmp_path / "agents.db", new_id=lambda: next(ids)) as store:
        assert [q.needs.task_id for q in store.queued()] == ["t2", "t3"]
        finish(store, running.id)
        successor = store.agents("PENDING")
        assert [(a.task_id, a.pool) for a in successor] == [("t2", "research")]
        assert [q.needs.task_id for q in store.queued()] == ["t3"]
        store.fail(successor[0].id, "disk full")
        assert [a.task_id for a in store.agents("PENDING")] == ["t3"]
        assert store.queued() == []
        # The queued task's parent came with it: its agent's end is reported to "p".
        assert [(n.task_id, n.status) for n in store.notifications("p")] == [
            ("t1", "TERMINATED"),
            ("t2", "FAILED"),
        ]


# ---------------------------------------------------------------------------------- D13


def test_D13_terminate_releases_the_agent_and_notifies_the_parent_durably(
    tmp_path: Path, ids: Iterator[str]
) -> None:
    path = tmp_path / "agents.db"
    with AgentStore(path, new_id=lambda: next(ids)) as store:
        agent = store.allocate(coder(), task_id="t1", pool="implementation", parent="run-7")
        assert store.pool_members("implementation") == [agent.id]
        assert store.notifications("run-7") == []
        finish(store, agent.id)
        assert store.pool_members("implementation") == []
        assert store.active_counts() == {}
        release = [r for r in store.audit(agent.id) if r.action == "release"]
        assert [r.detail["pool"] for r in release] == ["implementation"]
        assert store.verify_chain() is None
    with AgentStore(path) as store:
        expected = Notification(
            seq=1,
            parent="run-7",
            agent_id=agent.id,
            task_id="t1",
            status="TERMINATED",
            summary="archived",
            error=None,
        )
        assert store.notifications("run-7") == [expected]
        assert store.notifications("run-7", after=1) == []
        assert store.notifications("someone-else") == []
        # Already stored: returned at once, whenever the parent asks.
        assert store.wait_notification("run-7", timeout=0) == expected


def test_D13_a_waiting_parent_wakes_when_its_agent_terminates(store: AgentStore) -> None:
    agent = store.allocate(coder(), task_id="t1", parent="parent")
    received: list[Notification] = []
    waiter = threading.Thread(
        target=lambda: received.append(store.wait_notification("parent", timeout=60))
    )
    waiter.start()
    finish(store, agent.id)
    waiter.join(60)
    assert [(n.agent_id, n.status) for n in received] == [(agent.id, "TERMINATED")]


def _blocked_in_wait(thread: threading.Thread) -> bool:
    """Whether ``thread`` reached a blocking ``Condition.wait`` (checked until a generous
    deadline that only catches a hang)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or -1)
        while frame is not None:
            if frame.f_code.co_name == "wait" and "threading" in frame.f_code.co_filename:
                return True
            frame = frame.f_back
        threading.Event().wait(0.001)
    return False


def test_D13_a_parent_waiting_on_another_handle_of_the_file_sees_the_notification(
    tmp_path: Path, ids: Iterator[str]
) -> None:
    # Two store objects on one file stand for two processes: nothing wakes the waiter but
    # its own reading of the table.
    path = tmp_path / "agents.db"
    with (
        AgentStore(path, new_id=lambda: next(ids)) as child_side,
        AgentStore(path) as parent_side,
    ):
        agent = child_side.allocate(coder(), task_id="t1", parent="parent")
        received: list[Notification] = []
        waiter = threading.Thread(
            target=lambda: received.append(
                parent_side.wait_notification("parent", timeout=60, poll=0.01)
            )
        )
        waiter.start()
        assert _blocked_in_wait(waiter)  # the parent waits before the child ends
        finish(child_side, agent.id)
        waiter.join(30)  # well inside the wait's own 60 s: the poll, not the timeout, ended it
        assert not waiter.is_alive()
    assert [(n.agent_id, n.status) for n in received] == [(agent.id, "TERMINATED")]


def test_D13_a_failed_agent_notifies_with_its_error_and_waiting_can_time_out(
    store: AgentStore,
) -> None:
    with pytest.raises(WaitTimeoutError, match="parent 'p'"):
        store.wait_notification("p", timeout=0)
    agent = store.allocate(coder(), parent="p")
    store.fail(agent.id, "worktree missing")
    (note,) = store.notifications("p")
    assert (note.status, note.error, note.summary) == ("FAILED", "worktree missing", None)
    orphan_free = store.allocate(coder())  # no parent: nobody to tell
    store.fail(orphan_free.id, "x")
    assert len(store.notifications("p")) == 1


# ---------------------------------------------------------------------------------- D14


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_D14_orphan_scan_runs_periodically(store: AgentStore) -> None:
    clock = FakeClock()
    scanner = OrphanScanner(store, every=60, clock=clock)
    first = store.allocate(coder())
    finish(store, first.id, thought=False)
    with pytest.warns(OrphanWarning, match=first.id):
        assert scanner.tick() == [first.id]  # due at once
    clock.now = 59.0
    assert scanner.tick() is None
    assert scanner.due_in() == 1.0
    second = store.allocate(coder())
    finish(store, second.id, thought=False)
    clock.now = 60.0
    with pytest.warns(OrphanWarning, match=second.id):
        assert scanner.tick() == [second.id]  # flagged once: the first is not warned again
    clock.now = 120.0
    assert scanner.tick() == []
    assert scanner.scans == 3
    assert [r.agent_id for r in store.audit() if r.action == "orphan"] == [first.id, second.id]


def test_D14_the_scanner_loop_scans_on_schedule_until_stopped(store: AgentStore) -> None:
    clock = FakeClock()
    waits: list[float] = []
    orphan = store.allocate(coder())
    finish(store, orphan.id, thought=False)

    def wait(seconds: float) -> bool:
        # Time passes only here: each wait lasts exactly until the next scan is due.
        waits.append(seconds)
        clock.now += seconds
        return len(waits) == 3

    scanner = OrphanScanner(store, every=30, clock=clock, wait=wait)
    with pytest.warns(OrphanWarning):
        scanner.run()  # what start() runs on its thread, here in the foreground
    assert waits == [30.0, 30.0, 30.0]
    assert scanner.scans == 3
    assert [r.agent_id for r in store.audit() if r.action == "orphan"] == [orphan.id]


def test_D14_a_real_scanner_thread_stops_on_request(store: AgentStore) -> None:
    # An hour-long wait for the next scan: stop() must wake it, not wait it out.
    with OrphanScanner(store, every=3600) as scanner:
        with pytest.raises(UsageError, match="started already"):
            scanner.start()
        assert "orphan-scan" in [t.name for t in threading.enumerate()]
    assert "orphan-scan" not in [t.name for t in threading.enumerate()]
    with pytest.raises(UsageError, match="positive number of seconds"):
        OrphanScanner(store, every=0)


# ---------------------------------------------------------------------------------- D12


class Task(BaseModel):
    topic: str = ""
    facts: str = ""
    analysis: str = ""
    plan: str = ""
    applied: str = ""


CALLS: dict[str, int] = {}
CRASH_IN: set[str] = set()


def _enter(phase: str) -> None:
    CALLS[phase] = CALLS.get(phase, 0) + 1
    if phase in CRASH_IN:
        raise ConnectionError(f"crashed in {phase}")


def gather(state: Task) -> dict[str, str]:
    _enter("GATHER")
    return {"facts": f"facts about {state.topic}"}


def analyze(state: Task) -> dict[str, str]:
    _enter("ANALYZE")
    return {"analysis": f"analysed {state.facts}"}


def plan(state: Task) -> dict[str, str]:
    _enter("PLAN")
    return {"plan": f"plan from {state.analysis}"}


def apply(state: Task) -> dict[str, str]:
    _enter("APPLY")
    return {"applied": f"applied {state.plan}"}


def test_D12_each_phase_boundary_is_a_checkpoint_and_a_crash_resumes_at_the_last(
    tmp_path: Path,
) -> None:
    CALLS.clear()
    CRASH_IN.clear()
    CRASH_IN.add("PLAN")
    graph = phased_graph(
        "sub-agent", state=Task, gather=gather, analyze=analyze, plan=plan, apply=apply
    )
    with SqliteStore(tmp_path / "runs.db") as runs:
        app = graph.compile(store=runs)
        with pytest.raises(NodeError, match="crashed in PLAN"):
            app.invoke({"topic": "login"}, run_id="agent-a1")
        assert phase_checkpoints(app, "agent-a1") == [
            PhaseCheckpoint(Phase.GATHER, 1),
            PhaseCheckpoint(Phase.ANALYZE, 2),
        ]
        CRASH_IN.clear()
        final = app.resume("agent-a1")
        assert final.applied == "applied plan from analysed facts about login"
        assert [c.phase for c in phase_checkpoints(app, "agent-a1")] == list(Phase)
        assert [c.step for c in phase_checkpoints(app, "agent-a1")] == [1, 2, 3, 4]
    # The phases before the crash ran once; the crashed one ran again from its start.
    assert CALLS == {"GATHER": 1, "ANALYZE": 1, "PLAN": 2, "APPLY": 1}


def test_D15_the_queue_full_error_survives_a_process_boundary(store: AgentStore) -> None:
    profile = coder(max_tasks=1, queued=0)
    store.submit(profile, TaskNeeds())
    with pytest.raises(AgentQueueFullError) as caught:
        store.submit(profile, TaskNeeds())
    back = pickle.loads(pickle.dumps(caught.value))
    assert (type(back), back.agent_type, back.queue_depth) == (AgentQueueFullError, "coder", 0)
    assert str(back) == str(caught.value)
