"""The same run queue on SQLite: several worker processes of one machine share one file,
and a worker SIGKILLed mid-run loses nothing (its lease expires, another resumes the run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.errors import CheckpointError, RunNotFoundError
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext
from stargraph.workers import SqliteQueue, Worker, submit
from tests.postgres import workgraph

ROOT = Path(__file__).resolve().parents[2]  # on PYTHONPATH: workers import tests.postgres.*


def _spawn(db: Path, ledger: Path, *args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(SG_LEDGER=str(ledger), SG_NODE_SLEEP="0.01")
    return subprocess.Popen(
        [sys.executable, "-m", "stargraph.workers", "--db", str(db), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_three_processes_share_a_sqlite_queue_and_survive_a_kill(tmp_path: Path) -> None:
    db, ledger = tmp_path / "runs.db", tmp_path / "ledger.db"
    workgraph.setup_ledger(str(ledger))
    SqliteStore(db).close()
    for i in range(30):
        submit(db, "tests.postgres.workgraph:small", {"total": i})
    for _ in range(4):
        submit(db, "tests.postgres.workgraph:chain", {})
    args = ("--lease", "1", "--heartbeat", "0.2", "--poll", "0.1", "--idle-exit", "1.6")
    procs = [_spawn(db, ledger, *args) for _ in range(3)]
    victim = procs[0]
    deadline = time.monotonic() + 60
    with SqliteStore(db) as store:
        while sum(r.last_step for r in store.list_runs(limit=1000)) < 20:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == (-signal.SIGKILL if proc is victim else 0), err.decode()
    queue = SqliteQueue(db)
    try:
        by_graph = {item.run_id: item.graph_ref for item in queue.items()}
    finally:
        queue.close()
    small = [r for r, g in by_graph.items() if g == "tests.postgres.workgraph:small"]
    assert len(small) == 30
    attempts = Counter(_check_runs(db, ledger, by_graph).values())
    assert attempts[1] >= 30, "most runs were claimed once"
    assert set(attempts) <= {1, 2}


def _check_runs(db: Path, ledger: Path, by_graph: dict[str, str]) -> dict[str, int]:
    queue = SqliteQueue(db)
    try:
        items = queue.items()
    finally:
        queue.close()
    executed = []
    with SqliteStore(db) as store:
        for item in items:
            assert item.status == "done", item
            steps = 3 if by_graph[item.run_id] == "tests.postgres.workgraph:small" else 8
            history = store.get_steps(item.run_id)
            assert [s.step for s in history] == list(range(steps + 1))
            executed += [(item.run_id, w.node, s.step) for s in history for w in s.writes]
        assert store.integrity_check() == "ok"
    assert sorted(workgraph.ledger_rows(str(ledger))) == sorted(executed)
    return {item.run_id: item.attempts for item in items}


def test_in_process_worker_and_queue_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, ledger = tmp_path / "runs.db", tmp_path / "ledger.db"
    monkeypatch.setenv("SG_LEDGER", str(ledger))
    workgraph.setup_ledger(str(ledger))
    assert (
        submit(db, "tests.postgres.workgraph:small", {"total": 5}, run_id="fixed-id") == "fixed-id"
    )
    with pytest.raises(CheckpointError, match="already queued"):
        submit(db, "tests.postgres.workgraph:small", {}, run_id="fixed-id")
    with pytest.raises(CheckpointError, match="module:attribute"):
        submit(db, "no-colon", {})
    submit(db, "tests.postgres.workgraph:no_such_graph", {}, run_id="bad-ref")
    with Worker(db, lease_s=5) as worker:
        assert worker.run_once() == "done"
        assert worker.run_once() == "failed"
        assert worker.run_once() is None
        assert worker.queue.get("fixed-id").status == "done"
        assert worker.store.get_run("fixed-id").status == "done"
        bad = worker.queue.get("bad-ref")
        assert bad.status == "failed"
        assert "no_such_graph" in (bad.reason or "")
        with pytest.raises(RunNotFoundError):
            worker.queue.get("never-queued")


STOPPING: list[Worker] = []


def stop_my_worker(state: workgraph.WorkState, ctx: RunContext) -> dict[str, object]:
    """Asks the worker running it to stop with cancel=True (as its SIGTERM would), once."""
    while STOPPING:
        STOPPING.pop().stop(cancel=True)
    return workgraph.work(state, ctx)


def stopping_graph() -> Graph[workgraph.WorkState]:
    return (
        Graph("work-stopping", state=workgraph.WorkState)
        .with_node("a", workgraph.work)
        .with_node("b", stop_my_worker)
        .with_node("c", workgraph.work)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", "c")
        .with_edge("c", END)
    )


def test_a_stopping_worker_hands_its_run_back_to_the_sqlite_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop(cancel=True) - what SIGTERM does - stops the run after its step in flight and
    queues it again (this claim not counted); the next worker resumes it from there."""
    db, ledger = tmp_path / "runs.db", tmp_path / "ledger.db"
    monkeypatch.setenv("SG_LEDGER", str(ledger))
    workgraph.setup_ledger(str(ledger))
    run_id = submit(db, f"{__name__}:stopping_graph", {})
    outcomes: list[tuple[str, str]] = []
    with Worker(db, lease_s=30) as first:
        STOPPING.append(first)
        assert first.run(idle_exit_s=0, on_outcome=lambda r, o: outcomes.append((r, o))) == 1
    assert outcomes == [(run_id, "requeued")]
    queue = SqliteQueue(db)
    try:
        item = queue.get(run_id)
        assert (item.status, item.attempts, item.lease_owner) == ("queued", 0, None)
    finally:
        queue.close()
    with SqliteStore(db) as store:
        record = store.get_run(run_id)
        assert (record.status, record.last_step, record.stopped_by) == (
            "cancelled",
            2,
            "its worker is stopping",
        )
    with Worker(db, lease_s=30) as second:
        assert second.run_once() == "done"
    assert sorted(row[1:] for row in workgraph.ledger_rows(str(ledger))) == [
        ("a", 1),
        ("b", 2),
        ("c", 3),
    ]
    assert len(workgraph.ledger_rows(str(ledger), table="executions")) == 3  # each once
